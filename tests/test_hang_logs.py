"""Hang logs as users bring them from a cluster (issue 22, point 4), written here in the real formats (py-spy,
faulthandler, ProcessGroupNCCL's watchdog, gloo, srun + torchrun prefixes), none taken from the held-out set: a
check that the rules scored on tests/fixtures/logs/hangs_heldout/ hold on logs they were not written against.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rootcause.tools.observe.diagnosis import diagnose_run, diagnose_text
from rootcause.tools.run import ProcessStack, RunRecord

from tests.conftest import stdio_client, structured


def _pyspy(pid: int, frames: list[tuple[str, str, int]], extra_thread: bool = True) -> str:
    body = "".join(f"    {func} ({file}:{line})\n" for func, file, line in frames)
    other = ('Thread 77 (idle): "Thread-3 (_pin_memory_loop)"\n    get (queue.py:180)\n'
             "    _pin_memory_loop (torch/utils/data/_utils/pin_memory.py:49)\n    run (threading.py:982)\n"
             if extra_thread else "")
    return f'Process {pid}: python train.py --config cfg.yaml\nPython v3.11.9 (/usr/bin/python3.11)\n\n' \
           f'Thread {pid} (active): "MainThread"\n{body}{other}\n'


_ALL_REDUCE = [("all_reduce", "torch/distributed/distributed_c10d.py", 2501),
               ("wrapper", "torch/distributed/c10d_logger.py", 83),
               ("sync_gradients", "trainer/engine.py", 212),
               ("train_step", "trainer/engine.py", 170),
               ("main", "train.py", 61),
               ("<module>", "train.py", 80)]
_DATALOADER = [("poll", "multiprocessing/connection.py", 257),
               ("_try_get_data", "torch/utils/data/dataloader.py", 1133),
               ("__next__", "torch/utils/data/dataloader.py", 631),
               ("next_batch", "trainer/data.py", 44),
               ("train_step", "trainer/engine.py", 160),
               ("main", "train.py", 61),
               ("<module>", "train.py", 80)]


def test_a_multi_process_py_spy_dump_without_an_error_is_a_hang_with_each_call_site(tmp_path: Path) -> None:
    log = "".join(_pyspy(100 + r, _DATALOADER if r == 2 else _ALL_REDUCE) for r in range(4))
    d = diagnose_text(log, tmp_path)
    assert d.category == "hang" and d.exception_type is None
    assert len(d.stacks) == 4 and {s.collective for s in d.stacks} == {"all_reduce", None}
    assert {s.call_site for s in d.stacks} == {"engine:sync_gradients", "data:next_batch"}
    assert "engine:sync_gradients" in d.signature and "data:next_batch" in d.signature
    assert d.message.startswith("no progress: stack dumps and no error; waiting in all_reduce")
    # Another dump of the same job where every rank waits in the collective is another hang.
    alone = diagnose_text("".join(_pyspy(100 + r, _ALL_REDUCE) for r in range(4)), tmp_path)
    assert alone.category == "hang" and alone.signature != d.signature
    # The same dump pasted from another machine (other pids, other paths) is the same hang.
    moved = log.replace("Process 10", "Process 90").replace("trainer/", "src/trainer/")
    assert diagnose_text(moved, tmp_path).signature == d.signature


def test_ranked_dumps_name_the_rank_that_never_reached_the_collective(tmp_path: Path) -> None:
    log = "".join("".join(f"[rank{r}]:{line}\n" for line in _pyspy(100 + r, _DATALOADER if r == 2 else _ALL_REDUCE,
                                                                   extra_thread=False).splitlines())
                  for r in range(4))
    d = diagnose_text(log, tmp_path)
    assert d.category == "hang"
    outcomes = {k: v.outcome for k, v in d.ranks.items()}
    assert outcomes == {"0": "waiting", "1": "waiting", "2": "culprit", "3": "waiting"}
    assert "in no collective while the others wait in all_reduce" in d.ranks["2"].first_error
    assert d.ranks["2"].first_error.startswith("stands at ")  # its own place, not the others' collective's


def _faulthandler(root: str, function: str, line: int) -> str:
    return ("Thread 0x00007f1c2d3e4700 (most recent call first):\n"
            '  File "/usr/lib/python3.10/threading.py", line 324 in wait\n'
            '  File "/usr/lib/python3.10/queue.py", line 180 in get\n'
            f'  File "{root}/tools/prefetch.py", line 33 in _worker\n'
            '  File "/usr/lib/python3.10/threading.py", line 953 in run\n\n'
            "Current thread 0x00007f1c3a0b1740 (most recent call first):\n"
            f'  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 3375 '
            "in barrier\n"
            f'  File "{root}/tools/checkpoint.py", line {line} in {function}\n'
            f'  File "{root}/train.py", line 140 in main\n'
            f'  File "{root}/train.py", line 150 in <module>\n')


def test_a_faulthandler_dump_is_a_hang_told_apart_by_its_call_site(tmp_path: Path) -> None:
    save = diagnose_text("epoch 3 step 900 loss 1.92\n" + _faulthandler("/home/ana/proj", "save_shards", 88),
                         tmp_path)
    assert save.category == "hang" and save.stacks[0].collective == "barrier"
    assert save.stacks[0].call_site == "checkpoint:save_shards"
    load = diagnose_text("epoch 3 step 900 loss 1.92\n" + _faulthandler("/home/ana/proj", "load_shards", 120),
                         tmp_path)
    assert load.category == "hang" and load.signature != save.signature
    elsewhere = diagnose_text("epoch 3 step 12 loss 4.20\n" + _faulthandler("/scratch/u7/run2", "save_shards", 91),
                              tmp_path)
    assert elsewhere.signature == save.signature


_NCCL = ("{p}[rank{r}]:[E1104 10:22:31.118803012 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
         "operation timeout: WorkNCCL(SeqNum=57, OpType=ALLGATHER, NumelIn=2048, NumelOut=8192, Timeout(ms)=600000) "
         "ran for 600047 milliseconds before timing out.\n"
         "{p}[rank{r}]:[E1104 10:22:31.119044215 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank {r}]"
         "  failure detected by watchdog at work sequence id: 57 PG status: last enqueued work: 57, last completed "
         "work: 56\n")
_SIGNALLED = ("{p}[rank{r}]:[E1104 10:22:32.000511802 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank "
              "{r}] Received a dump signal due to a collective timeout from  rank 0 and we will try our best to dump "
              "the debug info. Last enqueued NCCL work: 56, last completed NCCL work: 56.This is most likely caused "
              "by incorrect usages of collectives, e.g., wrong sizes used across ranks.\n")


def test_the_nccl_watchdog_names_the_rank_that_never_entered_under_srun_and_torchrun(tmp_path: Path) -> None:
    # Two nodes, two ranks each: srun -l tags each line with its task (one torchrun per node).
    log = ("".join(_NCCL.format(p=f"{r // 2}: ", r=r) for r in (0, 1, 2))
           + _SIGNALLED.format(p="1: ", r=3)
           + "srun: error: gpu-b07: task 1: Exited with exit code 1\n"
           + "srun: error: gpu-a03: task 0: Exited with exit code 1\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "hang"
    assert d.ranks["3"].outcome == "culprit" and "never entered collective #57" in d.ranks["3"].first_error
    assert all(d.ranks[r].outcome == "hang" for r in ("0", "1", "2"))
    assert {r: info.node for r, info in d.ranks.items()} == {"0": "gpu-a03", "1": "gpu-a03", "2": "gpu-b07",
                                                             "3": "gpu-b07"}
    assert d.mismatch is not None and d.mismatch.seq == 57 and d.mismatch.culprit_ranks == [3]
    assert d.mismatch.group == "default_pg"
    assert "rank 3 never entered collective #57 of default_pg" in d.message
    # Without the rank that never entered, nobody is blamed: every rank waits.
    waiting = diagnose_text("".join(_NCCL.format(p="", r=r) for r in (0, 1, 2)), tmp_path)
    assert waiting.category == "hang" and waiting.mismatch is None
    assert {info.outcome for info in waiting.ranks.values()} == {"hang"}


def test_a_rank_that_only_saw_the_dump_signal_is_told_from_the_one_whose_watchdog_fired(tmp_path: Path) -> None:
    line = ("[rank{r}]:[E1104 10:22:32.1 ProcessGroupNCCL.cpp:1685] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
            "Observed flight recorder dump signal from another rank via TCPStore.\n")
    log = "".join(line.format(r=r) for r in (1, 2)) + _SIGNALLED.replace("56, last", "58, last").format(p="", r=3)
    d = diagnose_text(log, tmp_path)
    assert d.category == "hang"
    assert d.ranks["0"].outcome == "hang" and "watchdog" in d.ranks["0"].first_error
    assert {d.ranks[r].outcome for r in ("1", "2", "3")} == {"waiting"}
    assert "only saw rank 0's dump signal" in d.ranks["3"].first_error


def test_gloo_names_the_ranks_that_failed_the_monitored_barrier(tmp_path: Path) -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "/work/exp/train.py", line 77, in <module>\n    dist.monitored_barrier(timeout=t)\n'
           '  File "/venv/lib/python3.12/site-packages/torch/distributed/c10d_logger.py", line 81, in wrapper\n'
           "    return func(*args, **kwargs)\n"
           "RuntimeError: [Rank 0]: Ranks 2, 3 failed to pass monitoredBarrier in 60000 ms\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "hang"
    assert d.ranks["2"].outcome == d.ranks["3"].outcome == "culprit" and d.ranks["0"].outcome == "waiting"
    assert "ranks 2, 3 failed to pass the monitored barrier (reported by rank 0)" in d.message


def test_a_gloo_recv_timeout_is_a_hang_whose_call_site_tells_two_apart(tmp_path: Path) -> None:
    tb = ("Traceback (most recent call last):\n"
          '  File "/home/u/pp/{f}.py", line 31, in {fn}\n    dist.recv(buf, src=prev)\n'
          '  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 2030, in recv\n'
          "    pg.recv([tensor], src, tag).wait()\n"
          "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
          "1800000ms for recv operation to complete\n")
    a = diagnose_text(tb.format(f="stage", fn="receive_activations"), tmp_path)
    b = diagnose_text(tb.format(f="stage", fn="receive_grads"), tmp_path)
    assert a.category == b.category == "hang" and a.group == b.group and a.signature != b.signature


def test_a_desync_report_names_the_rank_that_did_not_join(tmp_path: Path) -> None:
    log = ("[rank1]:[E1104 10:22:31.1 ProcessGroupNCCL.cpp:1936] Rank 1\n"
           "[rank1]:\t - [1] Timeout at collective: BROADCAST, #12\n"
           "[rank1]:\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:\n"
           "[rank1]:\t   - [3] didn't join collective #12 (count from 1)\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "hang" and d.ranks["3"].outcome == "culprit" and d.ranks["1"].outcome == "hang"
    assert d.mismatch is not None and (d.mismatch.seq, d.mismatch.ops, d.mismatch.culprit_ranks) == (
        12, {"1": "BROADCAST"}, [3])


def test_an_ordinary_failure_is_no_hang(tmp_path: Path) -> None:
    log = ("Traceback (most recent call last):\n  File \"/w/train.py\", line 3, in <module>\n    x = y[4]\n"
           "IndexError: list index out of range\n")
    assert diagnose_text(log, tmp_path).category == "python_exception"
    oom = ("[rank1]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
           + _NCCL.format(p="", r=0))
    assert diagnose_text(oom, tmp_path).category == "cuda_oom"
    # One rank raised, the others time out waiting for it: the exception is the root, the timeouts its collateral.
    raised = ("[rank3]:Traceback (most recent call last):\n[rank3]:  File \"/w/train.py\", line 30, in <module>\n"
              "[rank3]:    batch = collate(items)\n[rank3]:ValueError: empty batch at step 4100\n"
              + "".join(_NCCL.format(p="", r=r) for r in (0, 1, 2)))
    d = diagnose_text(raised, tmp_path)
    assert d.category == "python_exception" and d.exception_type == "ValueError"
    assert d.ranks["3"].outcome == "fail" and d.ranks["0"].outcome == "hang"


def test_reproduces_hang_path_reads_the_stacks_it_captured(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("# the project's script\n")
    log = tmp_path / "run.log"
    log.write_text("step 10 loss 2.1\n")
    def dump(frames: list[tuple[str, str, int]]) -> str:
        return _pyspy(1, [(f, str(tmp_path / p) if p == "train.py" else p, n) for f, p, n in frames], False)
    waiting = [("all_reduce", "torch/distributed/distributed_c10d.py", 2501), ("step", "train.py", 40),
               ("<module>", "train.py", 90)]
    sleeping = [("sleep", "time.py", 1), ("load_batch", "train.py", 22), ("<module>", "train.py", 90)]
    record = RunRecord(run_id="r1", argv=["python", "train.py"], cwd=".", outcome="hang", exit_code=None, signal=9,
                       duration_s=12.0, timed_out="idle", log_path="run.log", log_bytes=17, head="step 10 loss 2.1\n",
                       tail="", stacks=[ProcessStack(pid=11, cmdline="python train.py", rank=0, method="py-spy",
                                                     text=dump(waiting)),
                                        ProcessStack(pid=12, cmdline="python train.py", rank=1, method="py-spy",
                                                     text=dump(sleeping))])
    d = diagnose_run(record, tmp_path)
    assert d.category == "hang" and d.location == "train.py:40"
    assert d.ranks["0"].outcome == "waiting" and d.ranks["1"].outcome == "culprit"
    assert "at train.py:22" in d.ranks["1"].first_error
    assert "train:step" in d.signature and "train:load_batch" in d.signature


@pytest.mark.anyio
async def test_diagnose_log_over_stdio_names_the_culprit_its_node_and_the_mismatch(repo: Path) -> None:
    log = ("".join(_NCCL.format(p=f"{r // 2}: ", r=r) for r in (0, 1, 2)) + _SIGNALLED.format(p="1: ", r=3)
           + "srun: error: gpu-b07: task 1: Exited with exit code 1\n"
           + "srun: error: gpu-a03: task 0: Exited with exit code 1\n")
    (repo / "job.err").write_text(log)
    dump = "".join(_pyspy(100 + r, _DATALOADER if r == 2 else _ALL_REDUCE) for r in range(4))
    async with stdio_client(repo) as client:
        result = await client.call_tool("diagnose_log", {"path": "job.err"})
        pasted = structured(await client.call_tool("diagnose_log", {"text": dump}))["diagnosis"]
    d = structured(result)["diagnosis"]
    assert d["category"] == "hang"
    assert d["ranks"]["3"] == {**d["ranks"]["3"], "outcome": "culprit", "node": "gpu-b07"}
    assert d["mismatch"]["seq"] == 57 and d["mismatch"]["culprit_ranks"] == [3]
    assert "rank 3 never entered collective #57 of default_pg" in result.content[0].text
    assert pasted["category"] == "hang" and "data:next_batch" in pasted["signature"]
    assert {s["call_site"] for s in pasted["stacks"]} == {"engine:sync_gradients", "data:next_batch"}

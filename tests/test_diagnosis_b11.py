"""The rules held-out batch 11 and hang batch 2 asked for (issues 22 and 23), each on a minimal log in other words than
the batches': a report that raises nothing but says its numbers are below a reference, or that it stopped; a traceback
printed as a Python list; a line whose grad norm is non-finite; the watchdog's words under any wrapper, older releases'
watchdog lines, the element count that tells two watchdog timeouts apart; two processes' writes glued into one line;
a c10d socket that stopped getting answers."""

from __future__ import annotations

from pathlib import Path

from rootcause.tools.observe.diagnosis import diagnose_text


def test_a_report_whose_numbers_fall_below_a_reference_is_a_metric_regression(tmp_path: Path) -> None:
    log = ("$ python eval.py --ckpt resnet50_e90.pt\n"
           "evaluating on 50000 images\n"
           "top1: 71.42 top5: 90.12\n"
           "That is 4.7 points below the paper's 76.1 for the same recipe.\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "metric_regression" and d.evidence == ["keywords"]
    assert d.message.startswith("no error line; the report's words: ")
    assert d.one_line().startswith("[metric_regression] from keywords alone: no error line")
    # Numbers without a comparison say nothing is wrong.
    assert diagnose_text("top1: 76.3 top5: 93.0\n", tmp_path).category == "python_exception"


def test_a_report_that_says_it_stopped_is_a_hang_and_other_failure_words_are_not_read(tmp_path: Path) -> None:
    log = ("Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2\n"
           "All distributed processes registered. Starting with 2 processes\n"
           "and then it hangs here forever, GPU utilisation at 100%\n")
    assert diagnose_text(log, tmp_path).category == "hang"
    # Only what raises nothing is read from words: an OOM or a NaN would have printed an error or a series.
    assert diagnose_text("training got slower and used more memory, maybe an oom soon\n", tmp_path).category == \
        "python_exception"


def test_a_traceback_printed_as_a_list_is_read(tmp_path: Path) -> None:
    lines = ["Traceback (most recent call last):\\n",
             '  File "/work/llm/train.py", line 88, in step\\n    out = model(x)\\n',
             "RuntimeError: CUDA error: an illegal memory access was encountered\\n"]
    log = "[rank3]: [" + ", ".join(f"'{line}'" for line in lines) + "]\n"
    d = diagnose_text(log, tmp_path)
    assert (d.category, d.exception_type) == ("cuda_error", "RuntimeError")
    assert [f.function for f in d.frames] == ["step"]


def test_a_non_finite_grad_norm_names_its_line(tmp_path: Path) -> None:
    both = diagnose_text("{'loss': nan, 'grad_norm': nan, 'lr': 1e-05, 'epoch': 0.1}\n", tmp_path)
    norm = diagnose_text("{'loss': 0.0, 'grad_norm': nan, 'lr': 1e-05, 'epoch': 0.1}\n", tmp_path)
    loss = diagnose_text("{'loss': nan, 'grad_norm': 1.25, 'lr': 1e-05, 'epoch': 0.1}\n", tmp_path)
    assert both.category == norm.category == loss.category == "nonfinite"
    assert both.group == norm.group != loss.group  # one bug, shown with or without the NaN loss
    assert both.signature != norm.signature  # which series the line shows non-finite is its place


def test_the_watchdogs_words_are_the_root_under_any_wrapper(tmp_path: Path) -> None:
    caught = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9120, OpType=ALLGATHER, NumelIn={n}, " \
             "NumelOut={m}, Timeout(ms)=600000) ran for 600122 milliseconds before timing out."
    bare = diagnose_text(f"[rank1]:[E1201 10:00:00.1 ProcessGroupNCCL.cpp:616] [Rank 1] {caught.format(n=64, m=128)}\n",
                         tmp_path)
    wrapped = diagnose_text("torch.distributed.DistBackendError: [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group "
                            f"watchdog thread terminated with exception: [Rank 1] {caught.format(n=64, m=128)}\n",
                            tmp_path)
    aborted = diagnose_text("RuntimeError: NCCL communicator was aborted on rank 1.  Original reason for failure was: "
                            f"[Rank 1] {caught.format(n=64, m=128)}\n", tmp_path)
    assert bare.category == wrapped.category == aborted.category == "hang"
    assert bare.group == wrapped.group == aborted.group == "v3|nccl-watchdog-timeout ALLGATHER|"
    other = diagnose_text(f"[rank1]:[E1201 10:00:00.1 ProcessGroupNCCL.cpp:616] [Rank 1] {caught.format(n=1, m=2)}\n",
                          tmp_path)
    assert other.group == bare.group and other.signature != bare.signature  # another tensor: another place
    assert "ALLGATHER(64)" in bare.signature


def test_older_watchdog_lines_without_a_sequence_number_are_read(tmp_path: Path) -> None:
    log = "".join(f"[E ProcessGroupNCCL.cpp:587] [Rank {r}] Watchdog caught collective operation timeout: "
                  "WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800351 milliseconds before timing out.\n"
                  for r in (2, 0))
    d = diagnose_text(log, tmp_path)
    assert d.category == "hang" and d.group == "v3|nccl-watchdog-timeout BROADCAST|"
    assert {rank: info.outcome for rank, info in d.ranks.items()} == {"0": "hang", "2": "hang"}


def test_two_processes_writes_glued_into_one_line_are_split(tmp_path: Path) -> None:
    log = ("2024-05-02 10:00:01 RuntimeError: [gloo/transport/tcp/pair.cc:598] Connection closed by peerRuntimeError\n"
           "2024-05-02 10:00:01 : [gloo/transport/tcp/pair.cc:598] Connection closed by peer\n")
    d = diagnose_text(log, tmp_path)
    assert d.message.startswith("[gloo/transport/tcp/pair.cc:598] Connection closed by peer")
    assert "peerRuntimeError" not in d.group


def test_a_c10d_socket_that_stopped_answering_is_a_hang(tmp_path: Path) -> None:
    log = ("[rank0]:[W1202 11:40:02.5 socket.cpp:489] [c10d] waitForInput: socket SocketImpl(fd=41, "
           "addr=[::ffff:10.0.0.5]:40112, remote=[::ffff:10.0.0.9]:29500) timed out after 600000ms\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "hang" and "c10d-socket-wait-timeout" in d.group


# Batch 12's rules (diagnosis batch 12 and hang batch 3), each on a minimal log in other words than the batches'.

def test_a_report_that_stops_or_names_a_reference_value_is_read_from_its_words(tmp_path: Path) -> None:
    stopped = ("12:01:09 | INFO | building dataset: 1,204,331 samples\n12:01:12 | INFO | epoch 1 begins\n\n"
               "(no further output for an hour, the GPUs sit at full load)\n")
    assert diagnose_text(stopped, tmp_path).category == "hang"
    named = ("eval: word error rate 7.9 on test-clean\n"
             "The README lists 6.1 for this recipe; the paper gets 5.9.\n")
    assert diagnose_text(named, tmp_path).category == "metric_regression"
    table = "| model | CER (mine) | official |\n|---|---|---|\n| conformer-s | 5.2 | 4.1 |\n"
    assert diagnose_text(table, tmp_path).category == "metric_regression"
    higher = "final eval_loss 1.31\nThe released checkpoint gets 1.18, mine ends 0.13 higher.\n"
    assert diagnose_text(higher, tmp_path).category == "metric_regression"


def test_a_grad_scaler_shrunk_to_nothing_is_nonfinite(tmp_path: Path) -> None:
    log = "RuntimeError: grad_scale is too small, exiting: 1.52587890625e-05\n"
    assert diagnose_text(log, tmp_path).category == "nonfinite"


def test_colour_codes_that_lost_their_escape_do_not_hide_a_workers_traceback(tmp_path: Path) -> None:
    worker = "[33m(TrainWorker pid=771, ip=10.2.0.8)[0m "
    log = (f"{worker}Traceback (most recent call last):\n"
           f'{worker}  File "/src/rl/worker.py", line 40, in update\n{worker}    loss.backward()\n'
           f"{worker}RuntimeError: CUDA error: an illegal instruction was encountered\n"
           "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. There are some "
           "potential root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage.\n")
    d = diagnose_text(log, tmp_path)
    assert (d.category, d.exception_type) == ("cuda_error", "RuntimeError")


def test_a_peer_lost_at_the_monitored_barrier_is_a_distributed_error_naming_the_peer(tmp_path: Path) -> None:
    lost = ("[rank2]: RuntimeError: Rank 2 successfully reached monitoredBarrier, but received errors while waiting "
            "for send/recv from rank 1. Please check rank 1 logs for faulty rank.\n"
            "[rank2]:  Original exception: \n"
            "[rank2]: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection reset by peer [10.0.0.3]:4410\n")
    d = diagnose_text(lost, tmp_path)
    assert d.category == "distributed_error"
    assert {r: i.outcome for r, i in d.ranks.items()} == {"1": "culprit", "2": "waiting"}
    # When rank 0 reports a rank failing to pass, the others' errors "from rank 0" are its answer, not its fault.
    owner = ("[E ProcessGroupGloo.cpp:138] [Rank 0]: Rank 3 failed to pass monitoredBarrier in 60000 ms\n"
             "[E ProcessGroupGloo.cpp:138] Rank 1 successfully reached monitoredBarrier, but received errors while "
             "waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n")
    d = diagnose_text(owner, tmp_path)
    assert d.category == "hang" and d.ranks["3"].outcome == "culprit" and d.ranks["0"].outcome != "culprit"


def test_ncclras_reporting_uneven_operation_counts_is_a_hang(tmp_path: Path) -> None:
    log = ("#0-0 (9a1c07e2) MISMATCH\n  Communicator ranks have different ReduceScatter operation counts\n"
           "  14 ranks have launched up to operation 2201\n  2 ranks have launched up to operation 2200\n")
    d = diagnose_text(log, tmp_path)
    assert d.category == "hang" and "nccl-ras-mismatch REDUCESCATTER" in d.group


def test_a_state_dict_loaded_into_an_empty_parameter_is_not_a_width_mismatch(tmp_path: Path) -> None:
    def log(current: str) -> str:
        return ("RuntimeError: Error(s) in loading state_dict for Linear:\n"
                f"\tsize mismatch for weight: copying a param with shape torch.Size([512, 256]) from checkpoint, the "
                f"shape in current model is torch.Size({current}).\n")

    empty, narrow, other = (diagnose_text(log(c), tmp_path) for c in ("[0]", "[384, 256]", "[128, 256]"))
    assert empty.category == narrow.category == "checkpoint_mismatch"
    assert narrow.group == other.group != empty.group


# Batch 13's rules (diagnosis batch 13 and hang batch 4).

def test_a_heartbeat_timeout_is_its_own_monitor_firing_in_its_group(tmp_path: Path) -> None:
    def log(pg: int) -> str:
        return (f"[rank2]:[E1202 03:11:09.1 ProcessGroupNCCL.cpp:1423] [PG {pg} Rank 2] Heartbeat monitor timed out! "
                "Process will be terminated after dumping debug info. workMetaList_.size()=12\n"
                f"[rank2]:[E1202 03:11:09.2 ProcessGroupNCCL.cpp:1260] [PG {pg} Rank 2] ProcessGroupNCCL preparing to "
                "dump debug info.\n")
    zero, four = diagnose_text(log(0), tmp_path), diagnose_text(log(4), tmp_path)
    assert zero.category == four.category == "hang" and zero.group == four.group
    assert "others saw its dump signal" not in zero.signature and zero.signature != four.signature


def test_gloo_closing_a_pair_on_timeout_is_a_hang(tmp_path: Path) -> None:
    assert diagnose_text("RuntimeError: [/opt/gloo/transport/tcp/pair.cc:446] Application timeout caused pair "
                         "closure\n", tmp_path).category == "hang"


def test_a_logger_restating_the_raised_exception_does_not_take_its_place(tmp_path: Path) -> None:
    log = ("2024-05-01 10:00:00 CRITICAL [trainer:90] Uncaught FloatingPointError: loss is nan at step 311\n"
           "Traceback (most recent call last):\n"
           '  File "/srv/lm/trainer.py", line 90, in step\n    raise FloatingPointError("loss is nan at step 311")\n'
           "FloatingPointError: loss is nan at step 311\n")
    d = diagnose_text(log, tmp_path)
    assert (d.category, d.exception_type) == ("nonfinite", "FloatingPointError")
    assert d.signature.endswith("|trainer:step")


def test_a_bare_signal_stands_at_the_program_that_received_it(tmp_path: Path) -> None:
    def log(script: str) -> str:
        return (f"[ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', '-u', 'tools/{script}.py', "
                "'--local_rank=0'] exits with return code = -9\n")
    a, b = diagnose_text(log("finetune"), tmp_path), diagnose_text(log("pretrain"), tmp_path)
    assert a.category == b.category == "host_oom" and a.group == b.group and a.signature != b.signature


def test_a_report_comparing_with_another_run_of_the_same_script_is_a_metric_regression(tmp_path: Path) -> None:
    log = "val mIoU 31.2 after 40k iterations on 4 nodes\n(on one node the same config reaches mIoU 44.0)\n"
    assert diagnose_text(log, tmp_path).category == "metric_regression"

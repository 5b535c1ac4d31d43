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

"""The diagnosis engine on targeted inputs: chains, ranks, torchrun reports, pytest, stacks, signatures, big files."""

from __future__ import annotations

import textwrap
from pathlib import Path

from rootcause.tools.observe.diagnosis import SIGNATURE_VERSION, diagnose_file, diagnose_text
from rootcause.tools.observe.diagnosis.signature import first_sentence, parameterise
from rootcause.tools.observe.diagnosis.text import split_lines

CHAINED = """\
Traceback (most recent call last):
  File "{root}/pkg/config.py", line 4, in width
    return cfg["width"]
KeyError: 'width'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "{root}/main.py", line 3, in <module>
    build()
  File "{root}/pkg/config.py", line 6, in width
    raise ValueError("config of run 1234 misses width") from exc
ValueError: config of run 1234 misses width
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "config.py").write_text("# project file\n")
    (tmp_path / "main.py").write_text("# entry\n")
    return tmp_path


def test_chained_exception_root_is_the_cause_with_project_location(tmp_path: Path) -> None:
    root = _project(tmp_path)
    d = diagnose_text(CHAINED.format(root=root), root)
    assert (d.exception_type, d.message, d.category) == ("KeyError", "'width'", "python_exception")
    assert d.location == "pkg/config.py:4"
    assert d.signature == f"{SIGNATURE_VERSION}|KeyError|'width'|config:width"
    assert d.frames[-1].in_project and d.keywords and len(d.keywords) <= 3
    # The same bug on another machine (other checkout path) groups with it: paths match by suffix.
    other = diagnose_text(CHAINED.format(root="/home/someone/else/checkout"), root)
    assert other.signature == d.signature and other.location == "pkg/config.py:4"


def test_wrapper_with_specific_cause_in_chain() -> None:
    log = textwrap.dedent("""\
        Traceback (most recent call last):
          File "a.py", line 1, in f
        KeyError: 'layer.0.weight'

        During handling of the above exception, another exception occurred:

        Traceback (most recent call last):
          File "a.py", line 3, in g
        RuntimeError: Error(s) in loading state_dict for Net:
        \tMissing key(s) in state_dict: "layer.0.weight".
        """)
    d = diagnose_text(log, Path("/nonexistent-root"))
    assert d.exception_type == "KeyError" and d.category == "checkpoint_mismatch"


def test_rank_prefixes_interleaved_and_root_cause_rank(tmp_path: Path) -> None:
    r0 = ["Traceback (most recent call last):", '  File "/w/train.py", line 9, in step',
          "    loss = model(x)", "RuntimeError: The size of tensor a (8) must match the size of tensor b (4) at "
          "non-singleton dimension 1"]
    r1 = ["Traceback (most recent call last):", '  File "/w/train.py", line 12, in step',
          "    dist.all_reduce(t)", "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 1."]
    lines = []
    for a, b in zip(r1, r0, strict=True):
        lines += [f"[rank1]: {a}", f"[rank0]: {b}"]
    d = diagnose_text("\n".join(lines), tmp_path)
    assert d.category == "shape_mismatch" and d.exception_type == "RuntimeError"
    assert d.ranks["0"].outcome == "fail" and "size of tensor a" in d.ranks["0"].first_error
    assert d.ranks["1"].outcome == "fail" and "DistBackendError" in d.ranks["1"].first_error
    for style in ("[default{r}]:", "rank {r}: ", "[1,{r}]<stderr>:"):  # Open MPI: [jobid,rank]
        assert [ln.rank for ln in split_lines(style.format(r=3) + "x")] == [3]


def test_torchrun_report_signal_root_cause(tmp_path: Path) -> None:
    report = textwrap.dedent("""\
        torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
        ============================================================
        train.py FAILED
        ------------------------------------------------------------
        Failures:
          <NO_OTHER_FAILURES>
        ------------------------------------------------------------
        Root Cause (first observed failure):
        [0]:
          time      : 2024-06-11_14:32:07
          host      : node-3
          rank      : 5 (local_rank: 1)
          exitcode  : -9 (pid: 4242)
          error_file: <N/A>
          traceback : Signal 9 (SIGKILL) received by PID 4242
        ============================================================
        """)
    d = diagnose_text(report, tmp_path)
    assert d.category == "host_oom" and d.ranks["5"].outcome in ("crash", "fail")
    # v3: the program that received the signal is its call site, on any machine; the group is the signal alone.
    v = SIGNATURE_VERSION
    assert (d.group, d.signature) == (f"{v}|signal SIGKILL|", f"{v}|signal SIGKILL||train")
    (tmp_path / "train.py").write_text("# the project's entry point\n")
    assert diagnose_text(report, tmp_path).signature == d.signature


def test_pytest_shape_error_inside_test_is_shape_mismatch(tmp_path: Path) -> None:
    log = (Path(__file__).parent / "fixtures" / "logs" / "shape_pytest_linear.log").read_text()
    d = diagnose_text(log, tmp_path)
    assert d.category == "shape_mismatch"
    assert d.failed_tests == ["tests/test_model.py::test_forward_shapes"]
    assert "mat1 and mat2" in d.message and d.frames[-1].function == "forward"


def test_nccl_watchdog_template_signature_ignores_rank_and_sequence(tmp_path: Path) -> None:
    line = ("[rank{r}]:[E1129 10:00:00.000 {pid} ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
            "ran for 600123 milliseconds before timing out.")
    a = diagnose_text(line.format(r=0, pid=11, seq=5), tmp_path)
    b = diagnose_text(line.format(r=7, pid=99, seq=4000), tmp_path)
    assert a.category == b.category == "hang" and a.signature == b.signature
    assert "nccl-watchdog-timeout ALLREDUCE" in a.signature and a.ranks["0"].outcome == "hang"
    c = diagnose_text(line.format(r=0, pid=11, seq=5).replace("ALLREDUCE", "BROADCAST"), tmp_path)
    assert c.signature != a.signature


def test_hang_stacks_from_a_log_flag_the_collective(tmp_path: Path) -> None:
    log = (Path(__file__).parent / "fixtures" / "logs" / "hang_faulthandler_timeout_dump.log").read_text()
    d = diagnose_text(log, tmp_path, timed_out="idle")
    assert d.category == "hang"
    assert any(s.collective == "barrier" for s in d.stacks)
    assert d.stacks[0].frames[-1].startswith("torch.distributed.distributed_c10d:barrier") or \
        any("barrier" in s.frames[-1] for s in d.stacks)


def test_parameterise_and_first_sentence() -> None:
    a = parameterise("Tried to allocate 2.00 GiB on /tmp/pytest-1/x.py pid 4411 at 10.0.0.2:29500 shape [4, 8]")
    b = parameterise("Tried to allocate 512.50 MiB on /var/tmp/zz/y.py pid 17 at 192.168.1.9:1234 shape [16, 2]")
    assert a == b
    assert parameterise("mat1 and mat2 shapes cannot be multiplied (4x8 and 16x2)") == \
        "mat1 and mat2 shapes cannot be multiplied (<shape> and <shape>)"
    assert first_sentence("CUDA out of memory. Tried to allocate 2 GiB.") == "CUDA out of memory."
    assert first_sentence("Error(s) in loading state_dict for M:\n\tMissing key(s) in state_dict: a") == \
        "Error(s) in loading state_dict for M: Missing key(s) in state_dict"


def test_signature_never_empty_even_without_an_error(tmp_path: Path) -> None:
    for text in ("", "just some output\n", "\x1b[31mred\x1b[0m"):
        d = diagnose_text(text, tmp_path, exit_code=1)
        assert d.signature.startswith(f"{SIGNATURE_VERSION}|") and len(d.signature) > 5
    assert diagnose_text("", tmp_path, signal=9).category == "host_oom"
    assert diagnose_text("", tmp_path, signal=11).category == "crash"


def test_big_file_is_read_streaming(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    filler = ("step 1 loss 2.0 some progress line\n" * 30_000).encode()
    with open(log, "wb") as fh:
        for _ in range(30):  # ~31 MB
            fh.write(filler)
        fh.write(CHAINED.format(root=tmp_path).encode())
        for _ in range(5):
            fh.write(filler)
    d = diagnose_file(log, tmp_path)
    assert d.exception_type == "KeyError" and len(d.excerpt) <= 4_000
    assert len(d.model_dump_json()) < 25_000


def test_signature_numbers_are_whole_tokens_and_identifiers_keep_digits(tmp_path: Path) -> None:
    assert parameterise("assert 1.6666666269302368 == 2.5") == parameterise("assert 1.5 == 2.5") == "assert <n> == <n>"
    assert parameterise("lr 3.2e-05 at 0x7f3a, NCCL version 2.21.5") == "lr <n> at <n>, NCCL version <n>"
    assert parameterise("torch.bfloat16 and float32 in fc2") == "torch.bfloat16 and float32 in fc2"
    assert parameterise("[PG 0 Rank 3] Watchdog caught collective operation timeout") == \
        "Watchdog caught collective operation timeout"
    test = 'tests/test_loss.py:14: in test_padding\n    assert loss.item() == 2.5\nE   assert {} == 2.5\n'
    one, two = (diagnose_text("=" * 20 + " FAILURES " + "=" * 20 + "\n" + "_" * 20 + " test_padding " + "_" * 20
                              + "\n" + test.format(v), tmp_path)
                for v in ("1.6666666269302368", "1.5"))
    assert one.category == "test_failure" and one.signature == two.signature


def test_the_call_site_is_the_reporters_code_on_any_machine(tmp_path: Path) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "model.py").write_text("# model\n")
    log = ('Traceback (most recent call last):\n  File "/home/{who}/{script}.py", line 3, in main\n    fit()\n'
           '  File "/opt/conda/lib/python3.11/site-packages/{pkg}/model.py", line 40, in forward\n    return f(x)\n'
           "ValueError: bad width 7\n")
    ann = diagnose_text(log.format(who="ann", script="train", pkg="mypkg"), tmp_path)
    ann_elsewhere = diagnose_text(log.format(who="ann2", script="train", pkg="mypkg"), tmp_path)
    bob = diagnose_text(log.format(who="bob", script="run_clm", pkg="mypkg"), tmp_path)
    # The root's installed package is in-app; another machine's script is the reporter's own code too.
    assert ann.signature == ann_elsewhere.signature
    assert ann.signature == f"{SIGNATURE_VERSION}|ValueError|bad width <n>|train:main>model:forward"
    assert bob.signature == f"{SIGNATURE_VERSION}|ValueError|bad width <n>|run_clm:main>model:forward"
    assert ann.group == bob.group == f"{SIGNATURE_VERSION}|ValueError|bad width <n>"
    assert ann.location == "mypkg/model.py:40"
    # An installed package that is not the root's is a library: the reporter's frame alone is the call site.
    other = diagnose_text(log.format(who="ann", script="train", pkg="otherpkg"), tmp_path)
    assert other.signature == f"{SIGNATURE_VERSION}|ValueError|bad width <n>|train:main" and other.location is None
    # No in-app frame at all: the innermost library frames stand in, as package.module:function.
    lib = diagnose_text(log.format(who="ann", script="train", pkg="otherpkg").replace("/home/ann/train.py",
                                   "/usr/lib/python3.11/runpy.py"), tmp_path)
    assert lib.signature == f"{SIGNATURE_VERSION}|ValueError|bad width <n>|runpy:main>otherpkg.model:forward"

"""The one reader of the scripts a command runs (tools/run/scripts.py): words, heads, the root's scripts."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from rootcause.tools.core.context import ToolContext
from rootcause.tools.engines.check_constraints import _scripts_text
from rootcause.tools.knowledge.context import facts_from_text
from rootcause.tools.observe.evidence import RunFields, declare
from rootcause.tools.observe.evidence.trees import experiment_tree
from rootcause.tools.run.scripts import command_words, script_text, scripts_inside, shell_words


def test_shell_words_are_shlex_words_with_comments_dropped() -> None:
    for text in ["python train.py --lr 0.1  # the fast one\ncd 'my dir' && ./run.sh", 'a "b # c" d#e f', "x\\ y",
                 "unclosed 'quote"]:
        try:
            expected = shlex.split(text, comments=True)
        except ValueError:
            expected = text.split()
        assert shell_words(text) == expected
    assert command_words(["/bin/sh", "-c", "python t.py # note"]) == ["python", "t.py"]
    assert command_words(["python", "t.py", "#", "x"]) == ["python", "t.py", "#", "x"]


def test_a_one_megabyte_line_is_split_in_linear_time(tmp_path: Path) -> None:
    long = "x" * 1_000_000
    started = time.perf_counter()
    words = shell_words(f"python train.py --tag {long} # {long}\n")
    assert words == ["python", "train.py", "--tag", long]
    assert time.perf_counter() - started < 2.0  # shlex.split: about 15 s on this line

    # a driver script outside the root whose one line is as long as a driver may be still reaches the root's script
    root, outside = tmp_path / "root", tmp_path / "drivers"
    root.mkdir()
    outside.mkdir()
    (root / "train.py").write_text("print('hi')\n")
    (outside / "run.sh").write_text(f"python {root / 'train.py'} --tag {long[:990_000]}\n")
    decl = declare(RunFields(command=["sh", str(outside / "run.sh")]), ToolContext.for_root(root).workspace,
                   label="t")
    started = time.perf_counter()
    tree = experiment_tree(decl, root)
    assert tree.kind == "root" and tree.driver == str(outside / "run.sh")
    assert time.perf_counter() - started < 5.0


def test_the_scripts_inside_the_root_that_a_command_names(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text('import torch.distributed as dist\ndist.init_process_group("gloo")\n')
    (tmp_path / "notes.txt").write_text("nccl\n")
    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere.py"
    outside.write_text('dist.init_process_group("nccl")\n')
    try:
        argv = ["python", "train.py", "notes.txt", str(outside), "missing.py"]
        assert scripts_inside(argv, tmp_path) == [tmp_path / "train.py"]
        # a shell command's scripts are found inside its string
        shell = ["/bin/sh", "-c", "cd . && python train.py # gloo run"]
        assert scripts_inside(shell, tmp_path) == [tmp_path / "train.py"]
        assert facts_from_text(_scripts_text(shell, tmp_path)).backend == "gloo"
    finally:
        outside.unlink()
    (tmp_path / "bad.py").write_bytes(b"x = '\xff'\n" + b"y" * 100)
    assert script_text(tmp_path / "bad.py", 8) == "x = '\ufffd'\n"
    assert script_text(tmp_path / "gone.py", 8) is None

"""The scoreboard: per-category accuracy, same-bug and near-miss pair agreement of a labelled folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from rootcause.tools.observe.diagnosis.scoreboard import main, score, table

OOM = """Traceback (most recent call last):
  File "/home/{who}/train.py", line 9, in step
    loss.backward()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {n} MiB. GPU 0 has a total capacity of 79.15 GiB
"""
KEYERROR = 'Traceback (most recent call last):\n  File "/w/a.py", line 3, in f\nKeyError: \'{key}\'\n'


def _folder(tmp_path: Path) -> Path:
    logs = {"oom_a.log": OOM.format(who="ann", n=20), "oom_b.log": OOM.format(who="bob", n=512),
            "key_lr.log": KEYERROR.format(key="lr"), "key_width.log": KEYERROR.format(key="width"),
            "key_lr_again.log": KEYERROR.format(key="lr")}
    for name, text in logs.items():
        (tmp_path / name).write_text(text)
    labels = [{"file": "oom_a.log", "category": "cuda_oom", "group": "oom"},
              {"file": "oom_b.log", "category": "cuda_oom", "group": "oom"},
              {"file": "key_lr.log", "category": "python_exception"},
              {"file": "key_width.log", "category": "python_exception"},
              # Labelled wrong on purpose: the scoreboard must count it as a miss.
              {"file": "key_lr_again.log", "category": "checkpoint_mismatch"}]
    (tmp_path / "labels.yaml").write_text(yaml.safe_dump(labels))
    return tmp_path


def test_scores_accuracy_same_bug_and_near_miss_pairs(tmp_path: Path, capsys) -> None:
    result, _ = score(_folder(tmp_path))
    assert result.per_category == {"cuda_oom": [2, 2], "python_exception": [2, 2], "checkpoint_mismatch": [0, 1]}
    assert result.same_bug == [1, 1]  # two reporters' paths do not split the OOM
    assert result.near_miss == [1, 1]  # KeyError 'lr' vs KeyError 'width' (same type, same category)
    assert result.wrong == ["key_lr_again.log: python_exception (want checkpoint_mismatch)"]
    rows = table([result]).splitlines()
    assert "| cuda_oom | 2/2 (100%) |" in rows and "| **all categories** | **4/5 (80%)** |" in rows
    assert main([str(tmp_path), "-v"]) == 0
    out = capsys.readouterr().out
    assert "near-miss pairs split | 1/1 (100%)" in out and "key_lr_again.log" in out


def test_the_command_line_explains_itself_and_refuses_a_folder_without_labels(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0 and "FOLDER" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        main([str(tmp_path)])
    assert refused.value.code == 2 and f"no labels.yaml in {tmp_path}" in capsys.readouterr().err


def test_near_misses_in_the_reporters_own_functions_are_split(tmp_path: Path) -> None:
    tb = ('Traceback (most recent call last):\n  File "/home/{who}/{proj}/model.py", line 9, in {fn}\n    y = f(x)\n'
          '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/linear.py", line 1, in forward\n'
          "RuntimeError: mat1 and mat2 shapes cannot be multiplied ({a} and {b})\n")
    (tmp_path / "a.log").write_text(tb.format(who="ann", proj="vae", fn="encode", a="4x9", b="8x2"))
    (tmp_path / "b.log").write_text(tb.format(who="bob", proj="vit", fn="head", a="2x7", b="5x5"))
    (tmp_path / "labels.yaml").write_text(yaml.safe_dump([
        {"file": "a.log", "category": "shape_mismatch", "near_miss": "mm"},
        {"file": "b.log", "category": "shape_mismatch", "near_miss": "mm"}]))
    result, _ = score(tmp_path)
    # Two projects' functions on other machines are two call sites (v3): one group, two signatures.
    assert result.near_miss == [1, 1] and "| near-miss pairs split | 1/1 (100%) |" in table([result])

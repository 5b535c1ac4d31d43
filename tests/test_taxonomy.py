"""Free symptom text -> category: the diagnosis rules first, the one vocabulary's prose rules second."""

from __future__ import annotations

import pytest
from rootcause.tools.ecosystem.demo.driver import SYMPTOM as DEMO_SYMPTOM
from rootcause.tools.judge.classify import classify_text
from rootcause.tools.vocabulary.categories import CATEGORIES
from rootcause.tools.vocabulary.symptoms import vocabulary


@pytest.mark.parametrize(("text", "category"), [
    ("test_padding fails: masked_mse returns 1.6667 instead of 2.5", "test_failure"),
    (DEMO_SYMPTOM, "test_failure"),
    ("loss NaN", "nonfinite"),
    ("test fails: the loss is NaN after one step", "nonfinite"),
    ("training hangs at step 10 on 8 GPUs", "hang"),
    ("grad norm explodes to 1e6 at step 300", "gradient_explosion"),
    ("the loss spikes every few hundred steps", "gradient_explosion"),
    ("CUDA OOM with lots of reserved memory", "cuda_oom"),
    ("the job got OOM-killed while loading data", "host_oom"),
    ("checkpoint does not load after renaming the projection", "checkpoint_mismatch"),
    ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x8 and 16x2)", "shape_mismatch"),
    ("tensors end up on different devices after .to()", "device_mismatch"),
    ("NCCL error on rank 3 during all_reduce", "distributed_error"),
    ("python segfaults at exit with core dumped", "crash"),
    ("the output is sometimes wrong", "python_exception"),
])
def test_classify_text(text: str, category: str) -> None:
    assert classify_text(text)[0] == category


def test_prose_rules_use_known_categories_in_precedence_order() -> None:
    rules = vocabulary().prose
    assert {r.category for r in rules} <= set(CATEGORIES)
    order = [r.category for r in rules]
    # root errors outrank their wrappers: a failing test on NaN is nonfinite, a test failure comes last
    assert order.index("nonfinite") < order.index("test_failure") and order[-1] == "test_failure"

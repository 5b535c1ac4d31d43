"""Knowledge of framework error messages: every line of the catalogue gets its DESIGN category.

tests/fixtures/logs/messages.yaml lists error lines as users see them (PyTorch, NCCL, CUDA, DeepSpeed,
Megatron-LM, vLLM, SGLang, Ray, transformers, ...), each labelled from the library's own source before
the engine ran on it. Each is diagnosed alone, as a one-line pasted log.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml
from rootcause.tools.observe.diagnosis import diagnose_text

CATALOGUE = Path(__file__).parent / "fixtures" / "logs" / "messages.yaml"
ENTRIES: list[dict[str, str]] = yaml.safe_load(CATALOGUE.read_text(encoding="utf-8"))
CATEGORIES = {"cuda_oom", "host_oom", "nonfinite", "gradient_explosion", "hang", "distributed_error",
              "checkpoint_mismatch", "shape_mismatch", "dtype_mismatch", "device_mismatch", "cuda_error",
              "import_error", "crash", "test_failure", "python_exception"}


def test_the_catalogue_covers_every_category_with_sourced_lines() -> None:
    assert len(ENTRIES) >= 150
    counts = Counter(e["category"] for e in ENTRIES)
    assert set(counts) == CATEGORIES and min(counts.values()) >= 6, counts
    assert all(e["source"].strip() and "\n" not in e["text"] for e in ENTRIES)
    texts = [e["text"] for e in ENTRIES]
    assert len(texts) == len(set(texts))


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{e['category']}-{i}" for i, e in enumerate(ENTRIES)])
def test_each_catalogued_line_gets_its_category(entry: dict[str, str], tmp_path: Path) -> None:
    diagnosis = diagnose_text(entry["text"] + "\n", tmp_path)
    assert diagnosis.category == entry["category"], (entry["text"][:200], entry["source"])

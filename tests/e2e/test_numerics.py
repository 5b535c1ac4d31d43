"""inspect_checkpoint and analyze_training_log through the real `rootcause serve` over stdio."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, error_text, stdio_client, structured
from tests.test_numerics_checkpoint import needs_torch, write_checkpoints
from tests.test_numerics_log import PNG_MAGIC, png_size, real_nan_log

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_analyze_training_log_over_stdio(repo: Path) -> None:
    for name in ("run_1gpu.log", "run_8gpu.log", "hf_trainer_nan.log"):
        shutil.copy(FIXTURES / "training_logs" / name, repo / name)
    async with stdio_client(repo) as client:
        result = await client.call_tool("analyze_training_log", {"path": "run_8gpu.log", "compare_to": "run_1gpu.log"})
        data = structured(result)
        assert data["first_divergent_step"] == 41 and data["rtol"] == 0.02
        assert "FIRST DIVERGENT STEP 41" in result.content[0].text
        data = structured(await client.call_tool("analyze_training_log", {"path": "hf_trainer_nan.log"}))
        assert data["first_nonfinite_step"] == 36 and data["first_nonfinite"]["value"] == "inf"
        assert "outside the root" in error_text(await client.call_tool("analyze_training_log", {"path": "/etc/hosts"}))


@needs_torch
async def test_inspect_checkpoint_over_stdio(tmp_path: Path, no_leftover_processes: None) -> None:
    root = write_checkpoints(tmp_path / "project")
    async with stdio_client(root) as client:
        result = await client.call_tool("inspect_checkpoint", {"path": "dcp_bad", "compare_to": "model.safetensors"})
        data = structured(result)
        assert data["format"] == "dcp" and data["compare_to"]["format"] == "safetensors"
        assert data["missing"] == ["fc1.weight"] and data["unexpected"] == ["fc_in.weight"]
        rename = data["likely_renames"][0]
        assert (rename["from"], rename["to"], rename["same_content"]) == ("fc1.weight", "fc_in.weight", True)
        assert {n["name"]: n["nan"] for n in data["nonfinite"]} == {"fc2.weight": 1, "norm.weight": 0}
        assert "Likely rename: fc1.weight -> fc_in.weight" in result.content[0].text
        refused = error_text(await client.call_tool("inspect_checkpoint", {"path": "with_args.pt"}))
        assert "weights_only=True" in refused and "allow_pickle=true" in refused


@needs_torch
async def test_real_nan_run_analysed_with_a_plot_over_stdio(repo: Path) -> None:
    """A real torch run (uncapped warm-up, NaN from about step 25, exit 0) through the real server."""
    real_nan_log(repo)
    async with stdio_client(repo) as client:
        result = await client.call_tool("analyze_training_log", {"path": "train.log", "plot": True})
        assert [block.type for block in result.content] == ["text", "image"]
        text, image = result.content
        data = structured(result)
        first = data["first_nonfinite_step"]
        assert first is not None and f"FIRST NON-FINITE at step {first}" in text.text
        assert "ENDS NON-FINITE" in text.text and f"is still rising at the first non-finite step {first}" in text.text
        assert data["lr"]["still_rising"] and data["largest_spike"]["factor"] > 3
        assert image.mime_type == "image/png"
        png = base64.b64decode(image.data)
        assert png[:8] == PNG_MAGIC and png == (repo / data["plot_path"]).read_bytes()
        assert png_size(repo / data["plot_path"]) == (1000, 810)

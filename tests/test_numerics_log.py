"""analyze_training_log: series, NaN onset, spikes, the run's end, lr, divergence, plot, bad input.

The line formats are tests/test_logs_metrics.py's.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.engines.analyze_training_log import (
    AnalyzeTrainingLogInput,
    AnalyzeTrainingLogResult,
    analyze_training_log,
)
from rootcause.tools.numerics.series import DEFAULT_RTOL

from tests.conftest import FIXTURES, error_text, memory_client, structured
from tests.test_numerics_checkpoint import needs_torch

pytestmark = pytest.mark.anyio
LOGS = FIXTURES / "training_logs"


@pytest.fixture
def logs(repo: Path) -> Path:
    for item in LOGS.iterdir():
        if item.suffix in {".log", ".jsonl"}:
            shutil.copy(item, repo / item.name)
    return repo


async def run(root: Path, **kwargs) -> AnalyzeTrainingLogResult:
    return await analyze_training_log(AnalyzeTrainingLogInput(**kwargs), ToolContext.for_root(root))


async def test_hf_trainer_log_going_nan(logs: Path) -> None:
    result = await run(logs, path="hf_trainer_nan.log")
    assert result.formats == {"python_dict": 41} and result.step_source == "inferred"
    assert result.steps == 40  # the eval dict joins step 20; the end-of-training summary is not a step
    assert result.first_nonfinite_step == 36
    assert result.first_nonfinite and (result.first_nonfinite.metric, result.first_nonfinite.value) == (
        "grad_norm", "inf")
    assert result.series["loss"].nonfinite == 4 and result.series["loss"].count == 40
    assert "eval_loss" in result.series and result.series["eval_loss"].first_step == 20
    assert "FIRST NON-FINITE at step 36" in result.summary()


async def test_megatron_spikes_never_lr(logs: Path) -> None:
    result = await run(logs, path="megatron_spike.log")
    assert result.formats == {"pipe": 100} and result.step_source == "explicit"
    assert [(s.step, s.metric) for s in result.spikes] == [(60, "grad_norm"), (61, "loss")]
    assert result.spikes[0].factor > 9
    assert result.series["lr"].max == pytest.approx(3e-4)  # lr ramps 10x in warmup: never a spike
    assert "3x the median of the previous 20 finite values" in result.spike_rule
    assert result.first_nonfinite_step is None
    assert "loss_scale" in result.series and result.series["loss"].first == pytest.approx(9.529659)


async def test_jsonl_and_tqdm(logs: Path) -> None:
    jsonl = await run(logs, path="metrics.jsonl")
    assert jsonl.formats == {"json": 30} and jsonl.series["loss"].first_step == 0
    assert jsonl.series["loss"].last_step == 290 and "eval/loss" in jsonl.series
    tqdm = await run(logs, path="tqdm_postfix.log")
    assert tqdm.formats == {"tqdm": 50} and tqdm.steps == 50 and set(tqdm.series) == {"loss", "lr"}
    series = json.loads((logs / tqdm.series_path).read_text())
    assert series["loss"][0] == [1, pytest.approx(9.496)]


async def test_two_runs_diverge_at_step_41(logs: Path) -> None:
    result = await run(logs, path="run_8gpu.log", compare_to="run_1gpu.log")
    assert result.ranks == ["0", "1"] and result.rank_used == "0"
    assert result.rtol == DEFAULT_RTOL and "bf16" in (result.rtol_rule or "")
    assert result.first_divergent_step == 41
    loss = next(d for d in result.divergence if d.metric == "loss")
    assert loss.compared_steps == 80 and loss.relative_difference == pytest.approx(0.048, abs=0.003)
    grad = next(d for d in result.divergence if d.metric == "grad_norm")
    assert grad.first_divergent_step is None  # only the loss departs
    loose = await run(logs, path="run_8gpu.log", compare_to="run_1gpu.log", rtol=0.1)
    assert loose.first_divergent_step is None and "no divergence above rtol 0.1" in loose.summary()
    same = await run(logs, path="run_1gpu.log", compare_to="run_1gpu.log")
    assert same.first_divergent_step is None


async def test_nan_in_one_run_only_diverges(repo: Path) -> None:
    (repo / "a.log").write_text("".join(f"step={i} loss={2.0 if i < 5 else 'nan'}\n" for i in range(1, 9)))
    (repo / "b.log").write_text("".join(f"step={i} loss=2.0\n" for i in range(1, 9)))
    result = await run(repo, path="a.log", compare_to="b.log")
    assert result.first_divergent_step == 5 and result.first_nonfinite_step == 5


async def test_bad_input(repo: Path) -> None:
    (repo / "prose.txt").write_text("Building wheels\nall done in 12 s\n")
    (repo / "timings.txt").write_text("epoch: 1 time: 12\nepoch: 2 time: 13\n")
    with pytest.raises(UsageError, match="outside the root"):
        await run(repo, path="../elsewhere.log")
    with pytest.raises(UsageError, match=r"no recognisable metric series in prose.txt.*Building wheels"):
        await run(repo, path="prose.txt")
    with pytest.raises(UsageError, match=r"found only numbers named epoch \(2\), time \(2\)"):
        await run(repo, path="timings.txt")
    with pytest.raises(UsageError, match="is a directory"):
        await run(repo, path=".")
    with pytest.raises(UsageError, match="rtol must be"):
        await run(repo, path="prose.txt", rtol=-1)


async def test_streaming_a_large_log(repo: Path) -> None:
    with open(repo / "big.log", "w") as fh:
        for i in range(1, 100_001):
            fh.write(f"[rank0]: step={i} loss={2 + 1 / i:.6f} grad_norm=1.0 lr=1e-4 note=padding-padding\n")
    result = await run(repo, path="big.log")
    assert result.steps == 100_000 and result.series["loss"].last == pytest.approx(2.00001)


async def test_session_evidence_and_mcp(logs: Path) -> None:
    from rootcause.tools.engines.start_session import StartSessionInput, start_session
    from rootcause.tools.record.store import SessionStore

    ctx = ToolContext.for_root(logs)
    session = start_session(StartSessionInput(symptom="loss is NaN after step 36"), ctx)
    async with memory_client(logs) as client:
        data = structured(await client.call_tool("analyze_training_log", {
            "path": "hf_trainer_nan.log", "session_id": session.session_id}))
        assert data["first_nonfinite_step"] == 36 and data["series"]["loss"]["count"] == 40
        text = error_text(await client.call_tool("analyze_training_log", {"path": "README.md"}))
        assert "no recognisable metric series in README.md" in text
    evidence = SessionStore(ctx.workspace).load(session.session_id).evidence
    assert evidence[-1].tool == "analyze_training_log" and evidence[-1].data["first_nonfinite_step"] == 36


# -- a real training run: an uncapped warm-up that ends in NaN and exits 0 --------------------------------------

TRAIN_SCRIPT = LOGS / "uncapped_warmup.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def real_nan_log(root: Path, name: str = "train.log") -> Path:
    """Run the tiny torch script with the project's interpreter; its stdout is the training log."""
    import subprocess
    import sys

    log = root / name
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, str(TRAIN_SCRIPT)], stdout=out, stderr=subprocess.PIPE, text=True,
                              timeout=120, check=False)
    assert done.returncode == 0, done.stderr  # the run "succeeds": NaN losses do not stop it
    return log


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_MAGIC and head[12:16] == b"IHDR"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def colour_pixels(path: Path, rgb: tuple[int, int, int], tolerance: int = 24) -> int:
    import matplotlib.image

    pixels = (matplotlib.image.imread(path)[..., :3] * 255).astype(int)
    return int((abs(pixels - np.array(rgb)).max(axis=-1) <= tolerance).sum())


def inked_pixels(path: Path) -> int:
    """Pixels that are not the white background."""
    import matplotlib.image

    pixels = matplotlib.image.imread(path)[..., :3]
    return int((pixels.min(axis=-1) < 0.9).sum())


@needs_torch
async def test_real_run_summary_answers_the_question(repo: Path) -> None:
    log = real_nan_log(repo)
    printed = [line.split() for line in log.read_text().splitlines()]  # step N loss X grad_norm Y lr Z
    losses = [float(p[3]) for p in printed]
    first_bad = next(int(p[1]) for p in printed if not all(math.isfinite(float(p[i])) for i in (3, 5)))
    trailing = len(losses) - max(i for i, v in enumerate(losses) if math.isfinite(v)) - 1
    result = await run(repo, path="train.log")
    text = result.summary()
    assert 15 <= first_bad <= 40 and result.first_nonfinite_step == first_bad
    assert f"FIRST NON-FINITE at step {first_bad}" in text
    # How the run ends: the NaN tail, never the last finite value as "last".
    loss = result.series["loss"]
    assert loss.trailing_nonfinite == trailing > 20 and loss.final == "nan"
    assert "loss: 60 points" in text and f"the last {trailing} values are NaN/Inf" in text
    assert not any(line.startswith("loss:") and ", last " in line.split(";")[0] for line in text.splitlines())
    # The largest spike, and the spikes just before the first NaN (not the first ones of the run).
    assert result.largest_spike is not None
    assert result.largest_spike.factor == max(s.factor for s in result.spikes)
    assert "Largest spike: step" in text
    before = result.spikes_before_nonfinite
    assert before and all(first_bad - 20 <= s.step < first_bad for s in before)
    assert f"Spikes in the 20 logged steps before step {first_bad}" in text
    # The cause: an lr that keeps climbing past its early maximum up to the first NaN.
    assert result.lr is not None and result.lr.still_rising and result.lr.at_first_nonfinite
    assert result.lr.step == first_bad and result.lr.ratio > 5
    assert f"is still rising at the first non-finite step {first_bad}" in text


@needs_torch
async def test_plot_of_a_real_run(repo: Path) -> None:
    real_nan_log(repo)
    result = await run(repo, path="train.log", plot=True)
    assert result.plot_path and result.plot_path.startswith(".rootcause/plots/") and result.plot_path.endswith(".png")
    png = repo / result.plot_path
    assert result.images() == [png] and f"Plot: {result.plot_path}" in result.summary()
    assert png_size(png) == (1000, 810)  # 1000 px wide, 250 px per metric (loss, grad norm, lr) + title
    assert inked_pixels(png) > 20_000  # curves, axes, labels: not a blank canvas
    assert colour_pixels(png, (214, 39, 40)) > 300  # tab:red: the first non-finite step's line and the NaN marks
    assert colour_pixels(png, (255, 127, 14)) > 100  # tab:orange: spike dots
    assert "plot_path" in result.model_dump() and "_plot_file" not in result.model_dump()
    without = await run(repo, path="train.log")
    assert without.plot_path is None and without.images() == []


async def test_plot_of_two_runs_marks_the_divergence(logs: Path) -> None:
    result = await run(logs, path="run_8gpu.log", compare_to="run_1gpu.log", plot=True)
    png = logs / (result.plot_path or "")
    assert png_size(png) == (1000, 810)
    assert colour_pixels(png, (148, 103, 189), tolerance=40) > 300  # tab:purple: the first divergent step, every axis
    assert colour_pixels(png, (153, 153, 153), tolerance=10) > 300  # the reference run in grey


def test_plotting_is_not_imported_at_start() -> None:
    import subprocess
    import sys

    code = ("import sys, rootcause.server.app, rootcause.tools.engines.analyze_training_log; "
            "print('matplotlib' in sys.modules, 'rootcause.tools.numerics.plot' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parent.parent)
    assert out.stdout.split() == ["False", "False"]


async def test_plot_image_over_mcp(logs: Path) -> None:
    async with memory_client(logs) as client:
        result = await client.call_tool("analyze_training_log", {"path": "megatron_spike.log", "plot": True})
        kinds = [block.type for block in result.content]
        assert kinds == ["text", "image"] and result.content[1].mime_type == "image/png"
        import base64

        assert base64.b64decode(result.content[1].data)[:8] == PNG_MAGIC
        assert structured(result)["plot_path"].startswith(".rootcause/plots/")


async def test_session_report_links_the_plot(logs: Path) -> None:
    from rootcause.tools.engines.start_session import StartSessionInput, start_session
    from rootcause.tools.record.report import render_report
    from rootcause.tools.record.store import SessionStore

    ctx = ToolContext.for_root(logs)
    session = start_session(StartSessionInput(symptom="loss is NaN after step 36"), ctx)
    result = await run(logs, path="hf_trainer_nan.log", plot=True, session_id=session.session_id)
    state = SessionStore(ctx.workspace).load(session.session_id)
    assert state.evidence[-1].data["plot_path"] == result.plot_path
    report = render_report(state)
    assert f"![analyze_training_log plot]({result.plot_path})" in report and (logs / result.plot_path).is_file()


def test_long_series_are_thinned_to_an_envelope() -> None:
    from rootcause.tools.numerics.plot import envelope

    steps = np.arange(1, 1_000_001)
    values = np.sin(steps / 5000.0) + 1.5
    values[123_456] = 99.0  # one spike among a million points
    values[500_000] = np.nan
    xs, ys = envelope(steps, values, limit=4000)
    assert len(xs) <= 4000 and np.isfinite(ys).all()
    assert 99.0 in ys and 123_457 in xs  # the extreme survives thinning
    assert ys.min() == np.nanmin(values)


def test_cli_plot_prints_the_path(logs: Path) -> None:
    import subprocess

    from tests.conftest import rootcause_executable

    out = subprocess.run([rootcause_executable(), "analyze-training-log", "megatron_spike.log", "--plot"], cwd=logs,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    shown = next(line for line in out.splitlines() if line.startswith("Plot: "))[len("Plot: "):]
    assert shown.startswith(".rootcause/plots/") and png_size(logs / shown) == (1000, 810)
    assert "Largest spike: step 60 grad_norm 11.463" in out

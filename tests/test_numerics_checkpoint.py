"""inspect_checkpoint on real checkpoints written by torch (state dicts, safetensors, HF shards, DCP)."""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.engines.inspect_checkpoint import (
    InspectCheckpointInput,
    InspectCheckpointResult,
    inspect_checkpoint,
)

from tests.conftest import error_text, memory_client, structured

pytestmark = pytest.mark.anyio


def torch_available() -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec("torch") is not None
    except ImportError:
        return False


needs_torch = pytest.mark.skipif(not torch_available(), reason="torch is not importable in the test interpreter "
                                                                 "(CI installs torch==2.13.0)")

WRITER = textwrap.dedent("""
    import argparse, json, math, os, sys
    from pathlib import Path
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import save_file

    dest = Path(sys.argv[1])
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(16, 8)
            self.fc1 = torch.nn.Linear(8, 12)
            self.norm = torch.nn.LayerNorm(12)
            self.fc2 = torch.nn.Linear(12, 4)

    net = Net()
    net.norm.to(torch.bfloat16)
    good = {k: v.clone() for k, v in net.state_dict().items()}
    # The broken one: fc1 renamed to fc_in (same values), a NaN and a +Inf in fc2, a -Inf in the bf16 norm.
    bad = {k: v.clone() for k, v in good.items()}
    bad["fc_in.weight"] = bad.pop("fc1.weight")
    bad["fc2.weight"][0, 0] = math.nan
    bad["fc2.weight"][1, 1] = math.inf
    bad["norm.weight"][3] = -math.inf
    reshaped = {k: v.clone() for k, v in good.items()}
    reshaped["fc2.bias"] = torch.zeros(5)
    reshaped["embed.weight"] = reshaped["embed.weight"].half()

    torch.save(good, dest / "model.pt")
    torch.save(bad, dest / "model_bad.pt")
    torch.save(reshaped, dest / "model_reshaped.pt")
    torch.save({"model": good, "args": argparse.Namespace(lr=0.1)}, dest / "with_args.pt")
    save_file(good, dest / "model.safetensors")
    save_file(bad, dest / "model_bad.safetensors")
    shards = dest / "sharded"
    shards.mkdir()
    names = sorted(bad)
    parts = {"model-00001-of-00002.safetensors": names[:3], "model-00002-of-00002.safetensors": names[3:]}
    for file, keys in parts.items():
        save_file({k: bad[k] for k in keys}, shards / file)
    index = {"metadata": {"total_size": 0}, "weight_map": {k: f for f, keys in parts.items() for k in keys}}
    (shards / "model.safetensors.index.json").write_text(json.dumps(index))

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
    dist.init_process_group("gloo", rank=0, world_size=1)
    dcp.save(good, checkpoint_id=str(dest / "dcp_good"))
    dcp.save(bad, checkpoint_id=str(dest / "dcp_bad"))
    dist.destroy_process_group()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_checkpoints(dest: Path) -> Path:
    """Run the torch writer as a subprocess (single-process gloo group for DCP)."""
    dest.mkdir(parents=True, exist_ok=True)
    script = dest.parent / "write_checkpoints.py"
    script.write_text(WRITER)
    proc = subprocess.run([sys.executable, str(script), str(dest), str(_free_port())], capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dest


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not torch_available():
        pytest.skip("torch is not importable in the test interpreter (CI installs torch==2.13.0)")
    return write_checkpoints(tmp_path_factory.mktemp("numerics") / "project")


async def run(root: Path, **kwargs) -> InspectCheckpointResult:
    return await inspect_checkpoint(InspectCheckpointInput(**kwargs), ToolContext.for_root(root))


def assert_broken_findings(result: InspectCheckpointResult) -> None:
    """What the writer planted in the broken checkpoint, whatever its format."""
    assert result.tensors == 7 and result.parameters == 16 * 8 + 8 * 12 + 12 + 12 + 12 + 12 * 4 + 4
    assert result.dtypes == {"float32": 5, "bfloat16": 2}
    assert result.values_checked
    nonfinite = {n.name: (n.nan, n.posinf, n.neginf) for n in result.nonfinite}
    assert nonfinite == {"fc2.weight": (1, 1, 0), "norm.weight": (0, 0, 1)}
    assert result.missing == ["fc1.weight"] and result.unexpected == ["fc_in.weight"]
    assert [(r.from_, r.to, r.same_content) for r in result.likely_renames] == [("fc1.weight", "fc_in.weight", True)]
    assert result.shape_mismatches == [] and result.dtype_mismatches == []


@needs_torch
async def test_torch_state_dict_against_reference(ckpts: Path) -> None:
    result = await run(ckpts, path="model_bad.pt", compare_to="model.pt")
    assert result.format == "torch" and result.compare_to and result.compare_to.format == "torch"
    assert_broken_findings(result)
    assert "fc1.weight -> fc_in.weight" in result.summary() and "NON-FINITE" in result.summary()
    inventory = [json.loads(line) for line in (ckpts / result.inventory_path).read_text().splitlines()]
    assert {r["name"] for r in inventory} >= {"fc_in.weight", "fc2.weight"}


@needs_torch
async def test_safetensors_same_findings_read_without_torch(ckpts: Path) -> None:
    result = await run(ckpts, path="model_bad.safetensors", compare_to="model.safetensors")
    assert result.format == "safetensors"
    assert result.interpreter == sys.executable  # numpy reads safetensors values; no torch interpreter needed
    assert_broken_findings(result)
    cross = await run(ckpts, path="model_bad.safetensors", compare_to="model.pt")
    assert_broken_findings(cross)


@needs_torch
async def test_dcp_directory(ckpts: Path) -> None:
    result = await run(ckpts, path="dcp_bad", compare_to="dcp_good")
    assert result.format == "dcp"
    assert_broken_findings(result)


@needs_torch
async def test_hf_sharded_index_and_directory(ckpts: Path) -> None:
    by_index = await run(ckpts, path="sharded/model.safetensors.index.json", compare_to="model.pt")
    assert by_index.format == "hf_sharded"
    assert_broken_findings(by_index)
    by_dir = await run(ckpts, path="sharded", compare_to="model.safetensors")
    assert by_dir.format == "hf_sharded" and by_dir.tensors == 7


@needs_torch
async def test_shape_and_dtype_mismatches(ckpts: Path) -> None:
    result = await run(ckpts, path="model_reshaped.pt", compare_to="model.pt")
    assert [(s.name, s.shape, s.reference_shape) for s in result.shape_mismatches] == [("fc2.bias", [5], [4])]
    assert [(d.name, d.dtype, d.reference_dtype) for d in result.dtype_mismatches] == [
        ("embed.weight", "float16", "float32")]
    assert result.missing == [] and result.unexpected == [] and result.nonfinite == []


@needs_torch
async def test_pickle_refused_without_allow_pickle(ckpts: Path) -> None:
    with pytest.raises(UsageError) as caught:
        await run(ckpts, path="with_args.pt")
    message = str(caught.value)
    assert "weights_only=True" in message and "argparse.Namespace" in message and "allow_pickle=true" in message
    allowed = await run(ckpts, path="with_args.pt", allow_pickle=True)
    assert allowed.tensors == 7 and not allowed.nonfinite


@needs_torch
async def test_values_false_reads_names_only(ckpts: Path) -> None:
    result = await run(ckpts, path="dcp_bad", values=False)
    assert result.tensors == 7 and not result.values_checked and result.nonfinite == []
    assert "not checked" in result.summary()


@needs_torch
async def test_interpreter_without_torch_is_a_usage_error(ckpts: Path) -> None:
    bare = shutil.which("python3", path="/usr/bin")
    probe = bare and subprocess.run([bare, "-c", "import torch"], capture_output=True).returncode
    if not probe:
        pytest.skip("no interpreter without torch at /usr/bin/python3")
    with pytest.raises(UsageError, match="needs torch, which is not importable"):
        await run(ckpts, path="model.pt", python=bare)


@needs_torch
async def test_session_evidence_and_mcp_alias(ckpts: Path) -> None:
    from rootcause.tools.engines.start_session import StartSessionInput, start_session
    from rootcause.tools.record.store import SessionStore

    ctx = ToolContext.for_root(ckpts)
    session = start_session(StartSessionInput(symptom="missing keys when loading the checkpoint"), ctx)
    await inspect_checkpoint(InspectCheckpointInput(path="model_bad.safetensors", compare_to="model.safetensors",
                                                    session_id=session.session_id), ctx)
    evidence = SessionStore(ctx.workspace).load(session.session_id).evidence
    assert evidence[-1].tool == "inspect_checkpoint" and evidence[-1].phase is None
    assert evidence[-1].data["likely_renames"] == [{"from": "fc1.weight", "to": "fc_in.weight"}]
    async with memory_client(ckpts) as client:
        data = structured(await client.call_tool("inspect_checkpoint", {"path": "model_bad.pt",
                                                                        "compare_to": "model.pt"}))
        assert data["likely_renames"][0]["from"] == "fc1.weight" and data["likely_renames"][0]["to"] == "fc_in.weight"
        text = error_text(await client.call_tool("inspect_checkpoint", {"path": "with_args.pt"}))
        assert "allow_pickle" in text
        text = error_text(await client.call_tool("inspect_checkpoint", {"path": "model.pt",
                                                                        "session_id": "20200101-000000-abcdef"}))
        assert "unknown session" in text


@needs_torch
def test_torch_never_imported_in_the_server_process(ckpts: Path) -> None:
    """In a fresh interpreter: both tools run in-process, torch only ever loads in the worker subprocess."""
    logs = Path(__file__).parent / "fixtures" / "training_logs"
    shutil.copy(logs / "run_1gpu.log", ckpts / "run_1gpu.log")
    code = textwrap.dedent(f"""
        import sys, anyio
        from rootcause.tools.core.context import ToolContext
        from rootcause.tools.engines.inspect_checkpoint import inspect_checkpoint, InspectCheckpointInput
        from rootcause.tools.engines.analyze_training_log import analyze_training_log, AnalyzeTrainingLogInput
        ctx = ToolContext.for_root({str(ckpts)!r})
        r = anyio.run(inspect_checkpoint, InspectCheckpointInput(path="dcp_bad", compare_to="model_bad.pt"), ctx)
        assert r.tensors == 7 and not r.missing, r
        anyio.run(analyze_training_log, AnalyzeTrainingLogInput(path="run_1gpu.log"), ctx)
        print("torch" in sys.modules)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"


# ------------------------------------------------------------------ without torch


def write_raw_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> None:
    """A safetensors file written byte by byte (no library): bf16 needs no numpy support this way."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, blob) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


async def test_bf16_and_fp16_nonfinite_from_bits(repo: Path) -> None:
    bf16 = struct.pack("<6H", 0x3F80, 0x7FC0, 0x7F80, 0xFF80, 0xFF81, 0x0000)  # 1, nan, +inf, -inf, nan, 0
    fp16 = struct.pack("<4H", 0x3C00, 0x7E00, 0xFC00, 0x7C00)  # 1, nan, -inf, +inf
    fp32 = struct.pack("<3f", 1.0, float("nan"), 2.0)
    e4m3 = bytes([0x38, 0x7F, 0xFF, 0x7E])  # 1, nan, -nan, 448 (no infinities in e4m3fn)
    ints = struct.pack("<2q", 7, -1)
    write_raw_safetensors(repo / "raw.safetensors", {
        "a.bf16": ("BF16", [2, 3], bf16), "b.fp16": ("F16", [4], fp16), "c.fp32": ("F32", [3], fp32),
        "d.e4m3": ("F8_E4M3", [4], e4m3), "e.ids": ("I64", [2], ints)})
    result = await run(repo, path="raw.safetensors")
    counts = {n.name: (n.nan, n.posinf, n.neginf) for n in result.nonfinite}
    assert counts == {"a.bf16": (2, 1, 1), "b.fp16": (1, 1, 1), "c.fp32": (1, 0, 0), "d.e4m3": (2, 0, 0)}
    assert result.dtypes == {"bfloat16": 1, "float16": 1, "float32": 1, "float8_e4m3fn": 1, "int64": 1}
    assert result.parameters == 6 + 4 + 3 + 4 + 2


async def test_bad_paths_and_unknown_formats(repo: Path) -> None:
    (repo / "notes.bin").write_bytes(b"GARBAGE!" * 4)
    (repo / "empty_dir").mkdir()
    (repo / "empty_dir" / "readme.txt").write_text("x")
    with pytest.raises(UsageError, match="outside the root"):
        await run(repo, path="/etc/hostname")
    with pytest.raises(UsageError, match=r"unknown checkpoint format: notes\.bin is 32 bytes starting with b'GARBAGE"):
        await run(repo, path="notes.bin")
    with pytest.raises(UsageError, match=r"not a checkpoint directory.*Found: readme.txt"):
        await run(repo, path="empty_dir")
    with pytest.raises(UsageError, match="does not exist"):
        await run(repo, path="model.pt", compare_to="nope.pt")
    (repo / "broken.index.json").write_text(json.dumps({"weight_map": {"w": "missing.safetensors"}}))
    with pytest.raises(UsageError, match=r"names shard 'missing\.safetensors', which does not exist"):
        await run(repo, path="broken.index.json")


@needs_torch
async def test_refused_reference_is_a_usage_error_too(ckpts: Path, no_leftover_processes: None) -> None:
    with pytest.raises(UsageError, match=r"with_args\.pt is a pickle that torch\.load\(weights_only=True\) refuses"):
        await run(ckpts, path="dcp_good", compare_to="with_args.pt")


# ------------------------------------------------------------------ load_into: what a load into the project leaves out

PROJECT_MODEL = textwrap.dedent('''
    """The project's model as its code builds it today: backbone.layer2 was renamed backbone.stage2."""
    import torch
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


    class Backbone(torch.nn.Module):
        def __init__(self, renamed: bool) -> None:
            super().__init__()
            self.layer1 = torch.nn.Linear(8, 16)
            setattr(self, "stage2" if renamed else "layer2", torch.nn.Linear(16, 16))
            self.renamed = renamed

        def forward(self, x):
            return (self.stage2 if self.renamed else self.layer2)(torch.relu(self.layer1(x)))


    class Net(torch.nn.Module):
        def __init__(self, renamed: bool = True) -> None:
            super().__init__()
            self.backbone = Backbone(renamed)
            self.head = torch.nn.Linear(16, 4)

        def forward(self, x):
            return self.head(self.backbone(x))


    class AppState:
        """The DCP tutorial's Stateful: get_state_dict / set_state_dict initialise and restore the optimizer."""

        def __init__(self, model, optimizer):
            self.model, self.optimizer = model, optimizer

        def state_dict(self):
            model, optim = get_state_dict(self.model, self.optimizer)
            return {"model": model, "optim": optim}

        def load_state_dict(self, state):
            set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                           optim_state_dict=state["optim"])


    def build():
        return Net()


    def build_before_rename():
        return Net(renamed=False)


    def fresh_training_state():
        model = Net(renamed=False)
        return {"model": model, "optim": torch.optim.AdamW(model.parameters(), lr=1e-3)}


    def resumed_app_state():
        model = Net(renamed=False)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        torch.optim.lr_scheduler.StepLR(optimizer, 10)  # as in training: it adds initial_lr to the param groups
        return {"app": AppState(model, optimizer)}


    def optimizer_of_a_wider_model():
        model = Net(renamed=False)
        extra = torch.nn.Linear(4, 4)
        return {"model": model, "optimizer": torch.optim.AdamW([*model.parameters(), *extra.parameters()])}


    def raises():
        raise FileNotFoundError("conf/train.yaml")


    def returns_a_number():
        return 42
''')

AUDIT_WRITER = textwrap.dedent('''
    import json, os, sys
    from pathlib import Path
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    dest = Path(sys.argv[1])
    sys.path.insert(0, str(dest))
    import project_model as pm

    torch.manual_seed(0)
    model = pm.build_before_rename()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 10)
    for _ in range(2):
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        scheduler.step()
    torch.save(model.state_dict(), dest / "probe.pt")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "lr_scheduler": scheduler.state_dict(), "step": 2}, dest / "train_state.pt")
    # torch's own answer for the probe, to hold the audit to
    loaded = pm.build().load_state_dict(torch.load(dest / "probe.pt"), strict=False)
    (dest / "strict_false.json").write_text(json.dumps({"missing": sorted(loaded.missing_keys),
                                                        "unexpected": sorted(loaded.unexpected_keys)}))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
    dist.init_process_group("gloo", rank=0, world_size=1)
    dcp.save({"model": model, "optim": optimizer, "step": 2}, checkpoint_id=str(dest / "dcp_plain"))
    dcp.save({"app": pm.AppState(model, optimizer)}, checkpoint_id=str(dest / "dcp_app"))
    dist.destroy_process_group()
    (dest / "bad_import.py").write_text("raise RuntimeError('needs CUDA_VISIBLE_DEVICES')\\n")
''')


def write_audit_project(dest: Path) -> Path:
    """A project with its model module, a probe state dict, a torch.save training state and two DCP checkpoints."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "project_model.py").write_text(PROJECT_MODEL)
    script = dest.parent / "write_audit_project.py"
    script.write_text(AUDIT_WRITER)
    proc = subprocess.run([sys.executable, str(script), str(dest), str(_free_port())], capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dest


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not torch_available():
        pytest.skip("torch is not importable in the test interpreter (CI installs torch==2.13.0)")
    return write_audit_project(tmp_path_factory.mktemp("audit") / "project")


def by_group(result: InspectCheckpointResult) -> dict[str, tuple[int, int, int | None, int | None]]:
    return {g.group: (g.tensors, g.entries, g.not_restored, g.missing) for g in result.groups}


@needs_torch
async def test_strict_false_probe_with_a_renamed_backbone_layer(project: Path) -> None:
    """One call names what load_state_dict(strict=False) skips on both sides, and pairs the rename."""
    result = await run(project, path="probe.pt", load_into="project_model:build")
    torch_says = json.loads((project / "strict_false.json").read_text())
    assert result.missing == torch_says["missing"] == ["backbone.stage2.bias", "backbone.stage2.weight"]
    assert result.unexpected == torch_says["unexpected"] == ["backbone.layer2.bias", "backbone.layer2.weight"]
    assert [(r.from_, r.to) for r in result.likely_renames] == [
        ("backbone.stage2.weight", "backbone.layer2.weight"), ("backbone.stage2.bias", "backbone.layer2.bias")]
    assert result.load_into and result.load_into.description == "Net (nn.Module)"
    assert result.load_into.placed_at == "" and result.compare_to is None
    assert by_group(result) == {"model": (6, 0, 2, 2)}
    text = result.summary()
    lines = text.splitlines()
    assert lines[1].split() == ["group", "keys", "tensors", "parameters", "bytes", "entries", "dtypes", "not",
                                "restored", "missing"]
    assert "WILL NOT BE RESTORED (model: stored, absent from the target): 2 tensors" in text
    assert ("MISSING (model: the target expects it, the checkpoint lacks it): 2: backbone.stage2.bias, "
            "backbone.stage2.weight") in text
    assert "Likely rename: stored backbone.layer2.weight is the target's backbone.stage2.weight" in text
    assert text.index("WILL NOT BE RESTORED") < text.index("All values finite")


@needs_torch
async def test_torch_save_training_state_groups_and_a_model_only_load(project: Path) -> None:
    plain = await run(project, path="train_state.pt", values=False)
    assert [(g.group, g.keys) for g in plain.groups] == [
        ("model", ["model"]), ("optimizer", ["optimizer"]), ("scheduler", ["lr_scheduler"]), ("extra", ["step"])]
    assert plain.tensors == 6 + 18 and plain.entries == 13 + 8 + 1
    assert by_group(plain)["optimizer"] == (18, 13, None, None)
    # The project loads the model only (the module is placed under the checkpoint's 'model' key)
    only_model = await run(project, path="train_state.pt", load_into="project_model:build_before_rename",
                           values=False)
    assert only_model.load_into and only_model.load_into.placed_at == "model"
    assert only_model.missing == []
    assert by_group(only_model) == {"model": (6, 0, 0, 0), "optimizer": (18, 13, 31, 0),
                                    "scheduler": (0, 8, 8, 0), "extra": (0, 1, 1, 0)}


@needs_torch
async def test_torch_save_optimizer_is_restored_by_position(project: Path) -> None:
    """Optimizer.load_state_dict takes the stored state whatever a fresh optimizer holds; group sizes must agree."""
    fresh = await run(project, path="train_state.pt", load_into="project_model:fresh_training_state", values=False)
    assert fresh.load_into and fresh.load_into.placed_at == "optim -> optimizer"
    assert by_group(fresh)["optimizer"][2:] == (0, 0) and fresh.load_into.would_raise == []
    wider = await run(project, path="train_state.pt", load_into="project_model:optimizer_of_a_wider_model",
                      values=False)
    assert wider.load_into and by_group(wider)["optimizer"][2] == 31
    assert wider.load_into.would_raise == [
        "optimizer: AdamW.load_state_dict raises ValueError: the checkpoint holds parameter groups of [6] "
        "parameters, the target's groups hold [8]"]


@needs_torch
async def test_dcp_fresh_optimizer_and_app_state(project: Path) -> None:
    fresh = await run(project, path="dcp_plain", load_into="project_model:fresh_training_state", values=False)
    assert fresh.format == "dcp" and fresh.missing == []
    optimizer_tensors = sorted(n for n in fresh.unexpected if n.startswith("optim.state."))
    assert len(optimizer_tensors) == 18 and by_group(fresh)["optimizer"] == (18, 13, 19, 0)
    assert "optim.param_groups.0.initial_lr" in fresh.unexpected  # the scheduler's, absent from a fresh optimizer
    assert "WILL NOT BE RESTORED (optimizer: stored, absent from the target): 18 tensors" in fresh.summary()
    # The tutorial's AppState goes through get_state_dict, which initialises the optimizer: everything restored
    app = await run(project, path="dcp_app", load_into="project_model:resumed_app_state", values=False)
    assert [(g.group, g.keys) for g in app.groups] == [("model", ["app.model"]), ("optimizer", ["app.optim"])]
    assert app.missing == [] and app.unexpected == [] and app.load_into
    assert app.load_into.description == "dict of 1: app AppState (Stateful)"
    assert "Every stored entry is restored and nothing the target expects is missing." in app.summary()


@needs_torch
async def test_bad_load_into_is_a_usage_error_in_our_words(project: Path, no_leftover_processes: None) -> None:
    cases = {
        "no_such_module:build": r"load_into 'no_such_module:build': importing it from .* failed: "
                                r"ModuleNotFoundError: No module named 'no_such_module'\.",
        "bad_import:build": r"importing it from .* failed: RuntimeError: needs CUDA_VISIBLE_DEVICES "
                            r"\(at bad_import\.py:1 in <module>\)",
        "project_model:nope": r"project_model \(.*project_model\.py\) has no attribute 'nope'",
        "project_model:raises": r"load_into 'project_model:raises': raised FileNotFoundError: conf/train\.yaml "
                                r"\(at project_model\.py:\d+ in raises\)",
        "project_model:returns_a_number": r"returned builtins\.int 42: nothing a checkpoint is loaded into",
        "project_model.py:build": r"load_into names a module, not a file",
        "rm -rf /": r"load_into takes module:callable",
    }
    for spec, pattern in cases.items():
        with pytest.raises(UsageError, match=pattern) as caught:
            await run(project, path="probe.pt", load_into=spec, values=False)
        assert "Traceback" not in str(caught.value) and caught.value.hint, spec
    with pytest.raises(UsageError, match="compare_to and load_into each name what path is compared with"):
        await run(project, path="probe.pt", compare_to="probe.pt", load_into="project_model:build")


@needs_torch
async def test_load_audit_session_evidence(project: Path) -> None:
    from rootcause.tools.engines.start_session import StartSessionInput, start_session
    from rootcause.tools.record.store import SessionStore

    ctx = ToolContext.for_root(project)
    session = start_session(StartSessionInput(symptom="loss jumps after resuming from the checkpoint"), ctx)
    await inspect_checkpoint(InspectCheckpointInput(path="dcp_plain", load_into="project_model:fresh_training_state",
                                                    values=False, session_id=session.session_id), ctx)
    evidence = SessionStore(ctx.workspace).load(session.session_id).evidence[-1]
    assert evidence.data["load_into"] == "project_model:fresh_training_state"
    assert {g["group"]: g["not_restored"] for g in evidence.data["groups"]} == {"model": 0, "optimizer": 19,
                                                                                "extra": 1}
    assert "Load into `project_model:fresh_training_state`: 20 stored entries not restored (optimizer 19, " \
           "extra 1), 0 expected ones missing" in evidence.summary


FSDP_JOB = textwrap.dedent('''
    """2 ranks, gloo, FSDP2: train 3 steps, dcp.save model + optimizer, then resume the way the bug does it."""
    import json, sys
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard

    import project_model as pm

    dist.init_process_group("gloo")
    torch.manual_seed(0)

    def sharded():
        model = pm.Net(renamed=False)
        fully_shard(model.backbone)
        fully_shard(model)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2)

    model, optimizer = sharded()
    for _ in range(3):
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    dcp.save({"model": model, "optim": optimizer}, checkpoint_id=sys.argv[1])
    resumed, fresh_optimizer = sharded()
    dcp.load({"model": resumed, "optim": fresh_optimizer}, checkpoint_id=sys.argv[1])
    if dist.get_rank() == 0:
        shard = next(iter(model.parameters()))
        print(json.dumps({"restored_optimizer_states": len(fresh_optimizer.state),
                          "param_type": type(shard).__name__, "world_size": dist.get_world_size()}))
    dist.destroy_process_group()
''')


@needs_torch
@pytest.mark.slow
async def test_dcp_from_a_two_rank_fsdp2_job_into_a_fresh_optimizer(tmp_path: Path) -> None:
    """A real torchrun job (2 gloo ranks, fully_shard) saves model + optimizer; a fresh optimizer restores none."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "project_model.py").write_text(PROJECT_MODEL)
    (root / "job.py").write_text(FSDP_JOB)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), "job.py", "ckpt"],
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    truth = json.loads(proc.stdout.strip().splitlines()[-1])
    assert truth == {"restored_optimizer_states": 0, "param_type": "DTensor", "world_size": 2}
    assert sorted(p.name for p in (root / "ckpt").iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    result = await run(root, path="ckpt", load_into="project_model:fresh_training_state")
    assert result.format == "dcp" and result.values_checked and result.nonfinite == []
    assert result.dtypes == {"float32": 24}
    groups = {g.group: g for g in result.groups}
    assert (groups["model"].tensors, groups["model"].not_restored, groups["model"].missing) == (6, 0, 0)
    optim = groups["optimizer"]
    assert optim.tensors == 18 and optim.not_restored_tensors == 18 and optim.missing == 0
    assert optim.not_restored_bytes == optim.bytes
    assert result.missing == [] and len([n for n in result.unexpected if n.startswith("optim.state.")]) == 18
    assert "WILL NOT BE RESTORED (optimizer: stored, absent from the target): 18 tensors" in result.summary()

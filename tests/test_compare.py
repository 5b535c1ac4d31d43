"""compare_setups on real git repositories and real recorded runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.engines.compare_setups import CompareSetupsInput, compare_setups
from rootcause.tools.engines.start_session import StartSessionInput, start_session
from rootcause.tools.record.store import SessionStore
from rootcause.tools.run import RunSpec, run_process
from rootcause.tools.setups.configs import ConfigParseError, flatten, parse
from rootcause.tools.setups.launcher import parse_invocation, parse_script

from tests.conftest import error_text, git, memory_client, structured

pytestmark = pytest.mark.anyio

CONFIG_GOOD = """\
trainer:
  optimizer:
    name: adamw
    lr: 0.001
  layers: [4, 8, 16]
data:
  batch_size: 32
"""
LAUNCH_GOOD = """\
#!/bin/bash
set -euo pipefail
NPROC=8
export NCCL_DEBUG=WARN
torchrun --standalone --nproc_per_node=$NPROC \\
    src/train.py --config configs/train.yaml --backend nccl > log.txt 2>&1
"""
LOCK_GOOD = """\
version = 1
[[package]]
name = "six"
version = "1.16.0"
[[package]]
name = "idna"
version = "3.7"
"""


def build_compare_repo(root: Path) -> Path:
    """Two commits: code (src/model.py), a YAML config (lr and one list item) and a launcher (nproc 8 -> 4)."""
    (root / "configs").mkdir()
    (root / "src").mkdir()
    (root / "configs" / "train.yaml").write_text(CONFIG_GOOD)
    (root / "launch.sh").write_text(LAUNCH_GOOD)
    (root / "src" / "model.py").write_text("def step(x):\n    return x * 2\n")
    (root / "src" / "train.py").write_text("import sys\nprint('train', sys.argv[1:])\n")
    (root / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "0.1"\ndependencies = ["six"]\n')
    (root / "uv.lock").write_text(LOCK_GOOD)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "good setup")
    (root / "configs" / "train.yaml").write_text(CONFIG_GOOD.replace("0.001", "0.01").replace("16]", "32]"))
    (root / "launch.sh").write_text(LAUNCH_GOOD.replace("NPROC=8", "NPROC=4"))
    (root / "src" / "model.py").write_text("def step(x):\n    return x * 3\n")
    (root / "uv.lock").write_text(LOCK_GOOD.replace("1.16.0", "1.17.0"))
    git(root, "commit", "-q", "-am", "bad setup")
    return root


def ctx(root: Path) -> ToolContext:
    return ToolContext.for_root(root)


def by_key(result) -> dict[str, object]:
    return {d.key: d for d in result.differences}


# ---------------------------------------------------------------- units


def test_flatten_nested_keys_and_lists() -> None:
    flat = flatten(parse(CONFIG_GOOD, "yaml"))
    assert flat == {"trainer.optimizer.name": "adamw", "trainer.optimizer.lr": 0.001, "trainer.layers[0]": 4,
                    "trainer.layers[1]": 8, "trainer.layers[2]": 16, "data.batch_size": 32}
    assert flatten(parse('{"a": {"b": [], "c": [{"d": 1}]}}', "json")) == {"a.b": [], "a.c[0].d": 1}
    assert flatten(parse('[x]\ny = {z = "w"}\n', "toml")) == {"x.y.z": "w"}
    with pytest.raises(ConfigParseError, match="invalid YAML"):
        parse("a: [1, 2\nb: }", "yaml")


def test_launcher_settings_from_scripts_and_commands() -> None:
    settings, others = parse_script(LAUNCH_GOOD)
    assert settings["nproc_per_node"] == "8" and settings["nnodes"] == "1" and settings["world_size"] == "8"
    assert settings["env.NCCL_DEBUG"] == "WARN" and settings["var.NPROC"] == "8"
    assert settings["backend"] == "nccl" and settings["program"] == "src/train.py"
    assert settings["args.--config"] == "configs/train.yaml"
    assert others == ["set -euo pipefail"]
    nested = parse_invocation("srun -N 2 --ntasks-per-node=1 torchrun --nnodes 2 --nproc-per-node 4 "
                              "-m pkg.train --lr 1e-4 trainer.seed=3".split())
    assert nested["launcher"] == "srun > torchrun" and nested["world_size"] == "8"
    assert nested["srun.ntasks_per_node"] == "1" and nested["program"] == "-m pkg.train"
    assert nested["args.--lr"] == "1e-4" and nested["args.trainer.seed"] == "3"
    accel = parse_invocation("accelerate launch --num_processes 16 --num_machines 2 --multi_gpu train.py".split())
    assert accel["world_size"] == "16" and accel["nnodes"] == "2" and accel["accelerate.multi_gpu"] == "true"
    module = parse_invocation("NCCL_P2P_DISABLE=1 python -u -m torch.distributed.run --nproc_per_node 2 t.py".split())
    assert module["env.NCCL_P2P_DISABLE"] == "1" and module["world_size"] == "2" and module["program"] == "t.py"
    plain = parse_invocation("python -m pytest -x tests/ -n 4".split())
    assert "launcher" not in plain and plain["args.-x"] == "true" and plain["args[0]"] == "tests/"


# ---------------------------------------------------------------- engine


async def test_two_commits_code_config_launcher_and_lock(repo: Path) -> None:
    build_compare_repo(repo)
    result = await compare_setups(CompareSetupsInput.model_validate(
        {"good": {"ref": "HEAD~1"}, "bad": {"ref": "HEAD"}}), ctx(repo))
    diffs = by_key(result)
    lr = diffs["configs/train.yaml:trainer.optimizer.lr"]
    assert (lr.kind, lr.good, lr.bad) == ("config", "0.001", "0.01")
    layer = diffs["configs/train.yaml:trainer.layers[2]"]
    assert (layer.good, layer.bad) == ("16", "32")
    assert "configs/train.yaml:trainer.layers[1]" not in diffs
    nproc = diffs["launch.sh:nproc_per_node"]
    assert (nproc.kind, nproc.good, nproc.bad) == ("launcher", "8", "4")
    assert (diffs["launch.sh:world_size"].good, diffs["launch.sh:world_size"].bad) == ("8", "4")
    assert diffs["launch.sh:var.NPROC"].bad == "4" and result.summary_counts["launcher"] == 3
    six = diffs["uv.lock:six"]
    assert (six.kind, six.good, six.bad) == ("package", "1.16.0", "1.17.0")
    hunks = [d for d in result.differences if d.kind == "code" and d.file == "src/model.py"]
    assert len(hunks) == 1 and hunks[0].good == "    return x * 2" and hunks[0].bad == "    return x * 3"
    assert {d.file for d in result.differences if d.kind == "code"} == {
        "src/model.py", "configs/train.yaml", "launch.sh", "uv.lock"}
    assert "4 files changed" in result.diff_stat
    assert result.summary_counts["config"] == 2 and result.summary_counts["code"] == 4
    assert result.total == len(result.differences) and result.full_list_path is None
    text = result.summary()
    assert "configs/train.yaml:trainer.optimizer.lr: 0.001 -> 0.01" in text
    assert "launch.sh:nproc_per_node: 8 -> 4" in text


async def test_ref_against_working_tree_and_untracked(repo: Path) -> None:
    build_compare_repo(repo)
    (repo / "src" / "model.py").write_text("def step(x):\n    return x * 4\n")
    (repo / "src" / "extra.py").write_text("VALUE = 1\n")
    result = await compare_setups(CompareSetupsInput.model_validate({"good": {"ref": "HEAD"}}), ctx(repo))
    code = {d.key: d for d in result.differences if d.kind == "code"}
    assert [d.bad for d in code.values() if d.file == "src/model.py"] == ["    return x * 4"]
    untracked = [d for d in code.values() if d.file == "src/extra.py"]
    assert len(untracked) == 1 and untracked[0].good is None and untracked[0].bad == "VALUE = 1\n"
    assert result.bad.tree == "working tree"
    reverse = await compare_setups(CompareSetupsInput.model_validate({"bad": {"ref": "HEAD"}}), ctx(repo))
    model = [d for d in reverse.differences if d.file == "src/model.py"]
    assert model[0].good == "    return x * 4" and model[0].bad == "    return x * 3"


async def record_run(root: Path, args: list[str], env: dict[str, str]) -> str:
    spec = RunSpec(argv=[sys.executable, "src/train.py", *args], cwd=root, env=env)
    record = await run_process(spec, ctx(root).workspace)
    assert record.outcome == "pass"
    return record.run_id


async def test_two_recorded_runs_env_command_and_named_configs(repo: Path) -> None:
    build_compare_repo(repo)
    (repo / "configs" / "other.yaml").write_text(CONFIG_GOOD.replace("batch_size: 32", "batch_size: 64"))
    good_run = await record_run(repo, ["--config", "configs/train.yaml", "--lr", "0.1"],
                                {"NCCL_DEBUG": "INFO", "WANDB_API_KEY": "aaa", "SAME": "1"})
    bad_run = await record_run(repo, ["--config", "configs/other.yaml", "--lr", "0.2"],
                               {"NCCL_DEBUG": "WARN", "NCCL_P2P_DISABLE": "1", "WANDB_API_KEY": "bbb", "SAME": "1"})
    result = await compare_setups(CompareSetupsInput.model_validate(
        {"good": {"run_id": good_run}, "bad": {"run_id": bad_run}}), ctx(repo))
    diffs = by_key(result)
    assert (diffs["NCCL_DEBUG"].kind, diffs["NCCL_DEBUG"].good, diffs["NCCL_DEBUG"].bad) == ("env", "INFO", "WARN")
    assert diffs["NCCL_P2P_DISABLE"].good is None and diffs["NCCL_P2P_DISABLE"].bad == "1"
    assert "SAME" not in diffs
    secret = diffs["WANDB_API_KEY"]
    assert secret.good.startswith("<redacted") and secret.good != secret.bad and "aaa" not in json.dumps(
        result.model_dump(mode="json"))
    assert (diffs["command:args.--lr"].kind, diffs["command:args.--lr"].good) == ("command", "0.1")
    pair = diffs["configs/train.yaml vs configs/other.yaml:data.batch_size"]
    assert (pair.kind, pair.good, pair.bad) == ("config", "32", "64")
    assert result.good.run_id == good_run and "configs/train.yaml" in (result.good.command or "")


async def test_session_keywords_and_diagnosis_flag_suspects(repo: Path) -> None:
    build_compare_repo(repo)
    started = start_session(StartSessionInput(symptom="loss diverges after the optimizer lr change"), ctx(repo))
    store = SessionStore(ctx(repo).workspace)
    store.record(started.session_id, "reproduce", "reproduced",
                 {"diagnosis": {"keywords": ["NCCL_DEBUG"], "location": "src/model.py:2",
                                "frames": [{"file": "src/model.py", "line": 2, "in_project": True}]}}, phase=1)
    result = await compare_setups(CompareSetupsInput.model_validate(
        {"good": {"ref": "HEAD~1"}, "bad": {"ref": "HEAD"}, "session_id": started.session_id}), ctx(repo))
    diffs = by_key(result)
    assert diffs["configs/train.yaml:trainer.optimizer.lr"].suspect
    assert not diffs["configs/train.yaml:trainer.layers[2]"].suspect
    model = next(d for d in result.differences if d.file == "src/model.py")
    assert model.suspect and "src/model.py" in (model.why or "")
    assert result.differences[0].suspect, "suspect differences come first"
    state = store.load(started.session_id)
    assert state.phase(2).status == "in_progress" and state.phase(1).status == "done"
    assert state.evidence[-1].tool == "compare_setups" and state.evidence[-1].data["total"] == result.total
    assert "trainer.optimizer.lr" in state.evidence[-1].summary


async def test_unparseable_config_is_a_note_and_the_rest_is_compared(repo: Path) -> None:
    build_compare_repo(repo)
    (repo / "configs" / "train.yaml").write_text("trainer: [1, 2\n  lr: }\n")
    result = await compare_setups(CompareSetupsInput.model_validate(
        {"good": {"ref": "HEAD"}, "bad": {"files": ["configs/train.yaml", "launch.sh"]}}), ctx(repo))
    assert any("configs/train.yaml: could not be parsed (invalid YAML" in n for n in result.notes)
    assert any(d.key.startswith("configs/train.yaml:lines") for d in result.differences)
    assert not any(d.kind == "launcher" for d in result.differences)  # launch.sh is unchanged
    await compare_setups(CompareSetupsInput.model_validate({"good": {"ref": "HEAD~1"}}), ctx(repo))


async def test_long_lists_go_to_a_file(repo: Path) -> None:
    good = {f"k{i}": {"value": i, "name": f"layer-{i}"} for i in range(800)}
    bad = {f"k{i}": {"value": i + 1, "name": f"layer-{i}-changed"} for i in range(800)}
    (repo / "big.json").write_text(json.dumps(good))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "big")
    (repo / "big.json").write_text(json.dumps(bad))
    result = await compare_setups(CompareSetupsInput.model_validate({"good": {"ref": "HEAD"}}), ctx(repo))
    assert result.total == 1601 and result.shown < result.total
    assert len(json.dumps(result.model_dump(mode="json", by_alias=True))) < 25_000
    full = json.loads((repo / result.full_list_path).read_text())
    assert full["total"] == 1601 and len(full["differences"]) == 1601
    assert result.full_list_path.startswith(".rootcause/compare/")
    assert f"the full list is in {result.full_list_path}" in result.summary()


@pytest.mark.parametrize(("arguments", "message"), [
    ({"good": {"ref": "-x"}}, "not a valid ref"),
    ({"good": {"ref": "no-such-branch"}}, "does not resolve"),
    ({"good": {"files": ["../outside.yaml"]}, "bad": {"ref": "HEAD"}}, "outside the root"),
    ({"good": {}, "bad": {}}, "nothing to compare"),
    ({"good": {"run_id": "20200101-000000-abcdef"}}, "unknown run"),
    ({"good": {"files": ["a.yaml"]}, "bad": {"files": ["a.yaml", "b.yaml"]}}, "pairwise"),
    ({"good": {"ref": "HEAD"}, "session_id": "20200101-000000-abcdef"}, "unknown session"),
])
async def test_bad_input(repo: Path, arguments: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        await compare_setups(CompareSetupsInput.model_validate(arguments), ctx(repo))


async def test_through_the_in_memory_client(repo: Path) -> None:
    build_compare_repo(repo)
    async with memory_client(repo) as client:
        result = await client.call_tool("compare_setups", {"good": {"ref": "HEAD~1"}, "bad": {"ref": "HEAD"}})
        data = structured(result)
        assert data["summary"]["launcher"] == 3 and data["summary"]["config"] == 2
        assert "launch.sh:nproc_per_node: 8 -> 4" in result.content[0].text
        assert "does not resolve" in error_text(await client.call_tool("compare_setups", {"good": {"ref": "nope"}}))

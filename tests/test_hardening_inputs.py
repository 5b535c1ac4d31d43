"""Malformed arguments to every tool (hypothesis), through the in-memory MCP client.

Each example takes a tool's base arguments (cheap commands such as `true`, small timeouts) and
replaces or drops one or two fields with hostile values: wrong types, huge strings, NUL bytes,
negative or enormous numbers, option-looking refs and package names, `..` paths, symlinks that
point outside the root. Every call must end, within a bound, in a result or a specific error
(never "rootcause internal error", never a bare generic one), nothing may be written outside
the root, and the server must still answer afterwards.

One server serves every example (a blocking portal keeps the client open in a worker thread),
so the hypothesis examples do not pay a server start each.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rootcause.server.catalog import TOOLS

from tests.conftest import git, memory_client

CALL_BOUND_S = 45.0
EXAMPLES = int(os.environ.get("RC_HYPOTHESIS_EXAMPLES", "100"))  # per tool; raise it for a deeper search
MARKER = "rc-hardening-outside"


class Server:
    def __init__(self, portal: BlockingPortal, client: Any, base: Path, root: Path, session_id: str) -> None:
        self.portal, self.client, self.base, self.root, self.session_id = portal, client, base, root, session_id

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        async def bounded() -> Any:
            with anyio.fail_after(CALL_BOUND_S):
                return await self.client.call_tool(name, arguments)

        return self.portal.call(bounded)


def _snapshot(base: Path, root: Path) -> dict[str, tuple[int, int]]:
    """Every path under the temp base outside the root (and the base's parent listing), with mtime and size."""
    seen: dict[str, tuple[int, int]] = {}
    for entry in base.parent.iterdir():
        stat = entry.lstat()
        seen[f"parent:{entry.name}"] = (stat.st_mtime_ns if entry == base else 0, 0)
    for folder, dirs, files in os.walk(base):
        here = Path(folder)
        if here == root:
            dirs[:] = []
            continue
        for name in [*dirs, *files]:
            path = here / name
            if path == root:
                continue
            stat = path.lstat()
            seen[str(path.relative_to(base))] = (stat.st_mtime_ns, stat.st_size)
        stat = here.lstat()
        seen[str(here.relative_to(base)) + "/"] = (stat.st_mtime_ns, 0)
    return seen


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("hardening")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{MARKER}: not for the server\n")
    (outside / "knowledge").mkdir()
    (outside / "knowledge" / "constraints.md").write_text("# Constraints\n\n## 1. Outside\n- never read\n")
    (outside / "train.log").write_text("step 1 loss 2.0\nstep 2 loss 1.5\n")
    root = base / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# project\n")
    (root / "train.log").write_text("".join(f"step {i} loss {2.0 / i:.4f} grad_norm 1.0\n" for i in range(1, 40)))
    (root / "error.log").write_text("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
                                    "ValueError: bad\n")
    (root / ".agents" / "knowledge").mkdir(parents=True)
    (root / ".agents" / "knowledge" / "constraints.md").write_text(
        "# Constraints\n\n## 1. Loss NaN with fp16\n- use bf16 for FSDP2 mixed precision\n")
    (root / "link_out").symlink_to(outside / "secret.txt")
    (root / "link_dir").symlink_to(outside)
    (root / "link_log").symlink_to(outside / "train.log")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(memory_client(root)) as client:
        srv = Server(portal, client, base, root, "")
        srv.session_id = srv.call("start_session", {"symptom": "ValueError: bad in x.py"}).structured_content[
            "session_id"]
        before = _snapshot(base, root)
        yield srv
        # The server still answers after every hostile call.
        alive = srv.call("start_session", {"symptom": "still there?"})
        assert not alive.is_error and alive.structured_content["session_id"]
    after = _snapshot(base, root)
    changed = {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert not changed, f"writes outside the root: {changed}"


def base_arguments(srv: Server) -> dict[str, list[dict[str, Any]]]:
    """Arguments each tool accepts or refuses cheaply (nothing here runs long or builds environments): the
    first of each list is refused for pointing outside or being option-like, the others go deeper."""
    sid = srv.session_id
    command = {"timeout_s": 10, "idle_timeout_s": 5}
    bisect = {"timeout_s": 5, "setup_timeout_s": 5, "keep": False}  # no pyproject.toml: refused before uv runs
    return {
        "start_session": [{"symptom": "loss is NaN", "path_hint": "quick"}],
        "reproduce": [{"command": "true", "runs": 1, "cwd": "link_dir", **command},
                      {"command": "true", "runs": 1, **command},
                      {"command": ["no-such-program-rc", "--upload-pack=x"], "runs": 2, **command}],
        "diagnose_log": [{"path": "link_out"}, {"path": "error.log"}, {"text": "RuntimeError: boom\n"}],
        "check_constraints": [{"symptom": "loss", "knowledge_dir": "link_dir/knowledge"},
                              {"symptom": "loss NaN fp16", "top_k": 3, "paths": []}],
        "bisect_env": [{"package": "-e", "version": "1.0", "command": "true", "worktrees": "off", **bisect},
                       {"package": "click", "version": "8.2.0", "command": "true", **bisect}],
        "bisect_versions": [{"package": "--upload-pack=x", "good": "1.0", "bad": "2.0", "command": "true", **bisect},
                            {"package": "click", "good": "8.1.0", "bad": "8.2.0", "command": "true", **bisect}],
        "bisect_commits": [{"good": "--upload-pack=x", "bad": "HEAD", "command": "true", **bisect},
                           {"good": "HEAD", "bad": "HEAD", "command": "true", **bisect}],
        "compare_setups": [{"good": {"files": ["link_out"]}, "bad": {"files": ["README.md"]}},
                           {"good": {"ref": "HEAD"}, "bad": {"files": ["README.md"]}}],
        "verify_hypothesis": [{"session_id": sid, "hypothesis": "x.py raises because the config misses width",
                               "prediction": "the command fails", "command": "true", "expect": "fail",
                               "changed": "nothing", "disproof": "the command passes", "runs": 1, **command}],
        "record_fix_attempt": [{"session_id": sid, "description": "nothing", "command": "true", "cwd": "link_dir",
                                **command},
                               {"session_id": sid, "description": "nothing", "command": "true", **command}],
        "check_collateral": [{"command": "true", "base": "--upload-pack=x", **command},
                             {"command": "true", "base": "HEAD", **command}],
        "capture_knowledge": [{"kind": "constraint", "title": "Hardening entry", "body": "- a bullet",
                               "knowledge_dir": "link_dir/knowledge"},
                              {"kind": "docs", "title": "Hardening doc", "body": "text", "file": "../outside/x.md"},
                              {"kind": "constraint", "title": "Hardening entry", "body": "- a bullet"}],
        "close_session": [{"session_id": "20200101-000000-abcdef"}, {"session_id": sid}],
        "inspect_checkpoint": [{"path": "link_out", "timeout_s": 20}, {"path": "README.md", "timeout_s": 20}],
        "analyze_training_log": [{"path": "train.log", "compare_to": "link_log"}, {"path": "train.log"}],
    }


HUGE = "x" * 200_000
HUGE_DIGITS = "9" * 200_000
HUGE_WORDS = "loss nan rank fsdp " * 10_000
HOSTILE_TEXT = st.sampled_from([
    "", " ", "\x00", "a\x00b", HUGE, HUGE_DIGITS, HUGE_WORDS, "--upload-pack=x", "-e", "--help", "-",
    "../../../../etc/passwd",
    "../outside/secret.txt", "link_out", "link_dir", "link_dir/secret.txt", "link_dir/knowledge", "link_log",
    "/etc/passwd", "~", "~0", "~no-such-user-rc/x",
    "é\u202e\ufeff", "$(touch pwned)", "HEAD~999", "a..b", "*", "..", ".", "\n", "x" * 300,
    "main@{-1}", "0" * 40, "1.0", ">=1,<", "torch==", "NaN",
])
HOSTILE_NUMBER = st.sampled_from([-1, 0, -10**9, 10**30, 2**63, 1e308, -1e-9, 0.0001, 3])
HOSTILE_OTHER = st.sampled_from([None, True, [], {}, ["-e"], {"a": 1}, [None], [["nested"]], {"": "x"},
                                 {"1A": "x"}, {"A": "\x00"}, {"PATH": ""}, ["../outside/secret.txt"],
                                 ["link_out"], {"ref": "--upload-pack=x"}, {"files": ["link_dir/secret.txt"]},
                                 {"python": "link_out"}, {"run_id": "../.."}, {"env": {"HF_TOKEN": "-"}}])
HOSTILE = st.one_of(HOSTILE_TEXT, HOSTILE_NUMBER, HOSTILE_OTHER, st.text(max_size=40))
NAMES = [tool.name for tool in TOOLS]
OUTSIDE = {"reproduce", "diagnose_log", "check_constraints", "compare_setups", "record_fix_attempt",
           "capture_knowledge", "inspect_checkpoint", "analyze_training_log"}


def _mutate(data: st.DataObject, arguments: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    arguments = dict(arguments)
    for _ in range(data.draw(st.integers(1, 2), label="mutations")):
        field = data.draw(st.sampled_from(fields), label="field")
        if data.draw(st.booleans(), label="drop") and field in arguments:
            del arguments[field]
        else:
            arguments[field] = data.draw(HOSTILE, label=field)
    return arguments


def _check(name: str, arguments: dict[str, Any], result: Any) -> None:
    shown = {k: (v[:60] + "…" if isinstance(v, str) and len(v) > 60 else v) for k, v in arguments.items()}
    if not result.is_error:
        assert isinstance(result.structured_content, dict), (name, shown)
        return
    text = result.content[0].text if result.content else ""
    assert text.strip(), f"{name}: empty error for {shown}"
    assert "internal error" not in text, f"{name}: {text[:600]} for {shown}"
    assert "Traceback" not in text, f"{name}: {text[:600]}"
    if text.startswith("Error executing tool"):
        # The SDK's own argument validation: acceptable when it names the field.
        assert "validation error" in text, f"{name}: generic error {text[:400]} for {shown}"
    assert len(text) <= 5_000, f"{name}: error of {len(text)} chars"


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_hostile_arguments(server: Server, name: str, data: st.DataObject) -> None:
    base = data.draw(st.sampled_from(base_arguments(server)[name]), label="base")
    spec = next(t for t in TOOLS if t.name == name)
    fields = sorted(set(spec.load()[1].model_fields) | set(base))
    arguments = _mutate(data, base, fields)
    _check(name, arguments, server.call(name, arguments))


def test_base_arguments_are_refused_or_answered_quickly(server: Server) -> None:
    """The unmutated bases: the first of each tool that points outside the root is refused as such."""
    for name, bases in base_arguments(server).items():
        for arguments in bases:
            _check(name, arguments, server.call(name, arguments))
        if name in OUTSIDE:
            result = server.call(name, bases[0])
            assert result.is_error and "outside the root" in result.content[0].text, (name, result.content)

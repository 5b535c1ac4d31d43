"""Security: secrets never reach the client, pickles need consent, symlinks do not lead out of the root.

(The HTTP transport's bind / bearer token / Origin checks are in tests/test_http.py.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rootcause.tools.core.redact import REDACTED, Redactor, is_secret_name

from tests.conftest import error_text, git, memory_client, stdio_client, structured

pytestmark = pytest.mark.anyio
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not importable: .venv/bin/pip install torch==2.13.0")

HF = "hf_" + "Q7wErTy9UiOp2AsDfGhJkLzXcVbNm1" + "xY"
RUN_ONLY = "opaque-run-value-7f3a9c2e"  # no known token shape: only its variable's name marks it secret
SERVER_SIDE = "server-side-value-41b8d0"  # in the server's own environment, inherited by the child
GHP = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
BEARER = "eyJhbGciOiJIUzI1NiJ9.payload-part.sig-part-9"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
PASSWORD = "hunter2-hunter2"
SECRETS = (HF, RUN_ONLY, SERVER_SIDE, GHP, BEARER, AWS, PASSWORD)

LEAK = '''\
import os
print("HF_TOKEN=" + os.environ["HF_TOKEN"])
print("using key", os.environ["RC_SERVICE_KEY"], "and", os.environ["RC_SERVER_API_KEY"])
print("pushing with", "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8")
print("Authorization: Bearer " + "eyJhbGciOiJIUzI1NiJ9.payload-part.sig-part-9")
print("aws", "AKIA" + "IOSFODNN7EXAMPLE", "password=" + "hunter2-hunter2")
raise RuntimeError("login failed for token " + os.environ["HF_TOKEN"] + " with key " + os.environ["RC_SERVICE_KEY"]
                   + " / " + os.environ["RC_SERVER_API_KEY"])
'''
RUN_ENV = {"HF_TOKEN": HF, "RC_SERVICE_KEY": RUN_ONLY, "NCCL_DEBUG": "INFO"}


def _leaks(result: Any) -> list[str]:
    text = json.dumps(result.structured_content) + "".join(getattr(c, "text", "") for c in result.content)
    return [s for s in SECRETS if s in text]


@pytest.fixture
def leaky(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RC_SERVER_API_KEY", SERVER_SIDE)
    (repo / "leak.py").write_text(LEAK)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "leak")
    return repo


def test_redactor_keeps_ordinary_text() -> None:
    r = Redactor([RUN_ONLY])
    assert r.text("KeyError: 'width' at step 5; TOKENIZERS_PARALLELISM=false; eos_token: </s>") == \
        "KeyError: 'width' at step 5; TOKENIZERS_PARALLELISM=false; eos_token: </s>"
    assert r.text(f"HF_TOKEN={HF} x {RUN_ONLY}") == f"HF_TOKEN={REDACTED} x {REDACTED}"
    assert r.text("https://user:pa55w0rd@github.com/x.git") == f"https://user:{REDACTED}@github.com/x.git"
    assert is_secret_name("OPENAI_API_KEY") and is_secret_name("hf_token") and not is_secret_name("TOKENIZERS_X")


async def test_secret_values_never_reach_the_client(leaky: Path) -> None:
    async with memory_client(leaky) as client:
        sid = structured(await client.call_tool("start_session", {"symptom": "login fails"}))["session_id"]
        results = {}
        rep = await client.call_tool("reproduce", {"command": "python leak.py", "runs": 1, "env": RUN_ENV,
                                                   "session_id": sid})
        results["reproduce"] = rep
        data = structured(rep)
        assert data["environment"]["env"]["HF_TOKEN"] == "<redacted>"  # the env snapshot redacts by name
        assert data["environment"]["env"]["NCCL_DEBUG"] == "INFO"
        d = data["diagnosis"]
        assert d["exception_type"] == "RuntimeError" and d["message"].startswith(f"login failed for token {REDACTED}")
        log_path = leaky / data["runs"][0]["log_path"]
        on_disk = log_path.read_text()
        assert all(s in on_disk for s in SECRETS), "the log on disk stays verbatim"
        results["diagnose_log path"] = await client.call_tool("diagnose_log", {"path": data["runs"][0]["log_path"]})
        results["diagnose_log text"] = await client.call_tool("diagnose_log", {"text": on_disk})
        results["record_fix_attempt"] = await client.call_tool("record_fix_attempt", {
            "session_id": sid, "description": "retry login", "command": "python leak.py", "env": RUN_ENV})
        results["verify_hypothesis"] = await client.call_tool("verify_hypothesis", {
            "session_id": sid, "hypothesis": "the login fails because the token is rejected",
            "prediction": "leak.py fails with the login error", "command": "python leak.py", "expect": "fail",
            "changed": "nothing", "disproof": "leak.py passes", "alternatives": ["the network is down"],
            "env": RUN_ENV, "runs": 1})
        results["check_collateral"] = await client.call_tool("check_collateral", {"command": "python leak.py",
                                                                                  "env": RUN_ENV})
        for name, result in results.items():
            assert not result.is_error, (name, result.content[0].text[:500])
            assert not _leaks(result), (name, _leaks(result))
        log = (await client.read_resource(data["runs"][0]["log_uri"])).contents[0].text
        assert "login failed for token" in log and not [s for s in SECRETS if s in log]
        report = (await client.read_resource(f"rootcause://sessions/{sid}")).contents[0].text
        assert "reproduce (Phase 1)" in report and not [s for s in SECRETS if s in report]


async def test_secrets_redacted_over_stdio_and_after_a_restart(leaky: Path) -> None:
    """Through the real server; a second server (no memory of the first call) still redacts the run's env values
    in the log resource: they are read from the run's metadata."""
    async with stdio_client(leaky) as client:
        rep = await client.call_tool("reproduce", {"command": "python leak.py", "runs": 1, "env": RUN_ENV})
        assert not _leaks(rep), _leaks(rep)
        uri = structured(rep)["runs"][0]["log_uri"]
    async with stdio_client(leaky) as client:
        log = (await client.read_resource(uri)).contents[0].text
    assert "login failed for token" in log and not [s for s in SECRETS if s in log]


@needs_torch
async def test_pickle_payload_runs_only_with_consent(repo: Path) -> None:
    """A torch.save file whose pickle would run a command: refused by weights_only, executed only when
    allow_pickle=true is given (consent)."""
    marker = repo / "payload-ran"
    code = ("import os, sys, torch\n"
            "class Payload:\n"
            "    def __reduce__(self):\n"
            "        return (os.system, ('touch ' + sys.argv[2],))\n"
            "torch.save({'w': torch.ones(2), 'p': Payload()}, sys.argv[1])\n")
    subprocess.run([sys.executable, "-c", code, str(repo / "evil.pt"), str(marker)], check=True, timeout=120)
    async with memory_client(repo) as client:
        message = error_text(await client.call_tool("inspect_checkpoint", {"path": "evil.pt"}))
        assert "weights_only" in message and "allow_pickle" in message
        assert not marker.exists(), "the payload ran without consent"
        await client.call_tool("inspect_checkpoint", {"path": "evil.pt", "allow_pickle": True})
    assert marker.exists(), "with allow_pickle the file is unpickled (the consent is what allows it)"


def _snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        out[str(path)] = (st.st_mtime_ns, st.st_size, path.read_bytes() if path.is_file() else b"")
    out[str(folder)] = (folder.lstat().st_mtime_ns, 0, b"")
    return out


async def test_symlinks_cannot_escape_the_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "knowledge").mkdir(parents=True)
    secret = "OUTSIDE-MARKER-3141"
    (outside / "job.log").write_text(f"RuntimeError: {secret}\n")
    (outside / "train.log").write_text("".join(f"step {i} loss {1.0 / i:.3f} {secret}\n" for i in range(1, 9)))
    (outside / "w.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    (outside / "knowledge" / "constraints.md").write_text(f"# Constraints\n\n## 1. {secret} rule\n- outside\n")
    (outside / "state").mkdir()
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# p\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    for name, target in [("job.log", "job.log"), ("train.log", "train.log"), ("w.safetensors", "w.safetensors"),
                         ("kdir", "knowledge")]:
        (root / name).symlink_to(outside / target)
    (root / ".agents" / "knowledge").mkdir(parents=True)
    (root / ".agents" / "knowledge" / "constraints.md").symlink_to(outside / "knowledge" / "constraints.md")
    before = _snapshot(outside)
    async with memory_client(root) as client:
        calls = [
            ("diagnose_log", {"path": "job.log"}),
            ("analyze_training_log", {"path": "train.log"}),
            ("analyze_training_log", {"path": "README.md", "compare_to": "train.log"}),
            ("inspect_checkpoint", {"path": "w.safetensors"}),
            ("capture_knowledge", {"kind": "constraint", "title": "Escaping folder", "body": "- no",
                                   "knowledge_dir": "kdir"}),
            ("capture_knowledge", {"kind": "constraint", "title": "Escaping file", "body": "- no"}),
            ("check_constraints", {"symptom": "rule", "knowledge_dir": "kdir"}),
            ("compare_setups", {"good": {"files": ["job.log"]}, "bad": {"files": ["README.md"]}}),
        ]
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            assert "outside the root" in error_text(result), (name, arguments)
            assert secret not in result.content[0].text
        # A symlinked knowledge file is not read (not indexed, not written through).
        found = structured(await client.call_tool("check_constraints", {"symptom": f"{secret} rule"}))
        assert found["entries"] == 0 and not found["matches"] and not found["files"]
    assert _snapshot(outside) == before, "something outside the root changed"
    assert os.path.islink(root / ".agents" / "knowledge" / "constraints.md")


async def test_symlinked_state_folder_is_refused(repo: Path, tmp_path: Path) -> None:
    """A `.rootcause` symlink (say, committed into a cloned repository) would carry every log and session out."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (repo / ".rootcause").symlink_to(outside)
    async with memory_client(repo) as client:
        for name, arguments in [("start_session", {"symptom": "x"}), ("reproduce", {"command": "true"})]:
            assert ".rootcause is a symlink" in error_text(await client.call_tool(name, arguments)), name
    assert not list(outside.iterdir())

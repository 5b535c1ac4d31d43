"""check_constraints and capture_knowledge through real `rootcause serve` subprocesses (official stdio client)."""

from __future__ import annotations

import difflib
import json
import random
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest
from rootcause.tools.knowledge.entries import parse_markdown

from tests.conftest import SHARED, error_text, git, memory_client, rootcause_executable, stdio_client, structured

VEOMNI = SHARED / "fixtures" / "veomni-knowledge"
needs_veomni = pytest.mark.skipif(not VEOMNI.is_dir(), reason=f"shared fixture folder {VEOMNI} is absent")
pytestmark = pytest.mark.anyio
GENERATED = "veomni/models/transformers/qwen3/generated/modeling_qwen3.py"


def veomni_repo(repo: Path) -> Path:
    folder = repo / ".agents" / "knowledge"
    shutil.copytree(VEOMNI, folder)
    for path in folder.iterdir():
        path.chmod(0o644)
    target = repo / GENERATED
    target.parent.mkdir(parents=True)
    target.write_text("class Qwen3Model:\n    pass\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "knowledge and a generated model")
    return folder


@needs_veomni
async def test_both_tools_over_stdio_on_the_fixture(repo: Path) -> None:
    folder = veomni_repo(repo)
    (repo / GENERATED).write_text("class Qwen3Model:\n    hand_edit = True\n")
    async with stdio_client(repo) as client:
        session = structured(await client.call_tool("start_session", {
            "symptom": "RuntimeError: Error(s) in loading state_dict: Missing key(s) after renaming a layer"}))
        sid = session["session_id"]
        result = await client.call_tool("check_constraints", {"session_id": sid, "top_k": 3})
        data = structured(result)
        assert data["matches"][0]["title"] == "DCP checkpoint keys must match model state dict"
        assert data["matches"][0]["file"] == ".agents/knowledge/constraints.md" and data["matches"][0]["line"] == 137
        assert [v["path"] for v in data["guard_violations"]] == [GENERATED]
        assert "dcp_checkpoint_keys" in [p["name"] for p in data["pitfalls"]]
        assert "GUARD: " + GENERATED in result.content[0].text
        written = structured(await client.call_tool("capture_knowledge", {
            "kind": "constraint", "session_id": sid, "section": "Checkpoint",
            "title": "Parameter renames need a key mapping for old checkpoints",
            "body": "- Add the old->new name map to the DCP load planner.\n- Otherwise old checkpoints stop loading."}))
        assert written["written"]["number"] == 28 and written["phase5"] == "done"
        dup = structured(await client.call_tool("capture_knowledge", {
            "kind": "constraint", "title": "Renamed parameters need a key map for older checkpoints",
            "body": "Add an old to new name mapping in the DCP load planner, or old checkpoints no longer load."}))
        assert dup["written"] is None and dup["duplicate_of"]["line"] == written["written"]["line"]
        assert "kind" in error_text(await client.call_tool("capture_knowledge", {"kind": "lesson", "title": "t",
                                                                                 "body": "b"}))
        assert "Markdown structure" in error_text(await client.call_tool("capture_knowledge", {
            "kind": "constraint", "title": "t", "body": "b", "section": "x\n# y"}))
        closed = structured(await client.call_tool("close_session", {"session_id": sid}))
        assert closed["closed"] and "capture_knowledge" in closed["report"]
    text = (folder / "constraints.md").read_text(encoding="utf-8")
    assert len([e for e in parse_markdown(text, "c").entries if e.kind == "numbered"]) == 28


async def test_both_tools_over_stdio_on_a_fresh_repository(repo: Path) -> None:
    async with stdio_client(repo) as client:
        data = structured(await client.call_tool("check_constraints", {
            "symptom": "grad norm is inf after gradient accumulation with FSDP2"}))
        assert data["entries"] == 0 and data["matches"] == []
        assert {p["name"] for p in data["pitfalls"]} >= {"fsdp2_grad_accumulation"}
        assert {c["name"] for c in data["checklists"]} == {"distributed_checklist", "numerical_checklist"}
        written = structured(await client.call_tool("capture_knowledge", {
            "kind": "constraint",
            "title": "Gradient accumulation must skip the reduce-scatter until the last micro-batch",
            "body": "Use set_requires_gradient_sync(False) on every micro-batch but the last."}))
        assert written["written"] == {"file": ".agents/knowledge/constraints.md", "line": 5, "title":
                                      "Gradient accumulation must skip the reduce-scatter until the last micro-batch",
                                      "section": "", "number": 1, "created_file": True, "new_section": False}
        data = structured(await client.call_tool("check_constraints", {
            "symptom": "grad norm is inf after gradient accumulation with FSDP2"}))
        assert data["matches"][0]["line"] == 5 and data["matches"][0]["number"] == 1
        guard = structured(await client.call_tool("capture_knowledge", {"kind": "regression_guard",
                                                                        "paths": ["README.md"]}))
        assert "no table mapping tests to CI" in guard["suggested_test"]["statement"]


def _distinct_entries(count: int) -> list[tuple[str, str]]:
    """Entries that share no content words, so none is a near-duplicate of another."""
    rng = random.Random(7)
    syllables = ["ka", "lo", "mi", "ru", "te", "va", "zo", "pe", "qu", "ni", "sa", "fo", "gu", "he", "ji", "wy"]
    words: set[str] = set()
    while len(words) < count * 9:
        words.add("".join(rng.choice(syllables) for _ in range(4)))
    pool = sorted(words)
    rng.shuffle(pool)
    out = []
    for i in range(count):
        w = pool[i * 9:(i + 1) * 9]
        out.append((f"{w[0].title()} {w[1]} {w[2]} invariant",
                    f"- {w[3]} {w[4]} {w[5]} before {w[0]}\n- {w[6]} {w[7]} {w[8]} otherwise"))
    return out


@needs_veomni
@pytest.mark.slow
async def test_twenty_concurrent_captures_from_four_stdio_clients(repo: Path) -> None:
    folder = veomni_repo(repo)
    before = (folder / "constraints.md").read_text(encoding="utf-8")
    entries = _distinct_entries(20)
    results: list[dict] = []

    async def client_worker(batch: list[tuple[str, str]]) -> None:
        async with stdio_client(repo) as client, anyio.create_task_group() as tg:
            for title, body in batch:
                async def one(title: str = title, body: str = body) -> None:
                    results.append(structured(await client.call_tool(
                        "capture_knowledge", {"kind": "constraint", "title": title, "body": body})))
                tg.start_soon(one)

    async with anyio.create_task_group() as tg:
        for k in range(4):
            tg.start_soon(client_worker, entries[k * 5:(k + 1) * 5])
    assert len(results) == 20 and all(r["written"] for r in results), [r for r in results if not r["written"]]
    after = (folder / "constraints.md").read_text(encoding="utf-8")
    ops = difflib.SequenceMatcher(None, before.splitlines(keepends=True), after.splitlines(keepends=True),
                                  autojunk=False).get_opcodes()
    assert all(tag in ("equal", "insert") for tag, *_ in ops)
    parsed = [e for e in parse_markdown(after, "c").entries if e.kind == "numbered"]
    assert sorted(e.number for e in parsed) == list(range(1, 48))
    for title, _ in entries:
        assert after.count(f"**{title}**") == 1
    assert sorted(r["written"]["number"] for r in results) == list(range(28, 48))
    numbers = {e.title: e.number for e in parsed}
    assert all(numbers[r["written"]["title"]] == r["written"]["number"] for r in results)
    assert not list(folder.glob(".*.tmp"))


async def test_schemas_over_memory_client(repo: Path) -> None:
    async with memory_client(repo) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    check = tools["check_constraints"].input_schema["properties"]
    assert {"symptom", "session_id", "top_k", "paths", "check_codegen", "knowledge_dir"} <= set(check)
    capture = tools["capture_knowledge"].input_schema["properties"]
    assert {"kind", "title", "body", "session_id", "section", "paths"} <= set(capture)
    assert "guard_violations" in tools["check_constraints"].output_schema["properties"]
    assert "duplicate_of" in tools["capture_knowledge"].output_schema["properties"]


def test_cli_subcommands(repo: Path) -> None:
    exe = rootcause_executable()
    out = subprocess.run([exe, "--root", str(repo), "capture-knowledge", "--kind", "none", "--body",
                          "config typo only", "--json"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["recorded_none"]["reason"] == "config typo only"
    out = subprocess.run([exe, "--root", str(repo), "check-constraints", "--symptom", "loss is NaN"],
                         capture_output=True, text=True, check=True)
    assert "no knowledge entry matches" in out.stdout or "Knowledge: 0 entries" in out.stdout
    bad = subprocess.run([exe, "--root", str(repo), "capture-knowledge", "--kind", "constraint", "--title", "t"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "body is empty" in bad.stderr

"""compare_setups: every difference between a working setup and a broken one (Phase 2, "diff completely").

A side is a tree (a commit or the working tree) plus optionally files, an interpreter, env and
a recorded run. Code is diffed by git hunk; config files are parsed and flattened to dotted
keys; shell scripts and commands are read for their launcher settings; lock files and the two
interpreters' freezes give package versions; env comes from the given dict or the run's record.
Nothing is summarised away: when the list is long the full list is written to
`.rootcause/compare/<id>.json` and the result keeps the suspect differences first.
"""

from __future__ import annotations

import json
import secrets
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field
from rootcause.tools.core import gitrepo
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult, bounded
from rootcause.tools.record.store import SessionState, SessionStore, require_open
from rootcause.tools.setups import configs, locks
from rootcause.tools.setups.codediff import CodeDiff, code_diff, read_at
from rootcause.tools.setups.launcher import parse_invocation, parse_script
from rootcause.tools.setups.models import KINDS, Difference, diff_maps
from rootcause.tools.setups.sides import SetupSide, Side, command_files, project_files, redact, resolve_side
from rootcause.tools.setups.suspect import focus_from, mark

RESULT_BUDGET = 18_000
VALUE_LIMIT = 1_200
_LAUNCHER_KEYS = {"launcher", "nproc_per_node", "nnodes", "num_processes", "world_size", "backend", "node_rank",
                  "master_addr", "master_port", "gpus_per_node"}
_LAUNCHER_PREFIXES = ("torchrun.", "accelerate.", "deepspeed.", "srun.", "mpirun.")


class CompareSetupsInput(BaseModel):
    """Compare a working setup with a broken one completely and list ALL differences.

    Use in Phase 2 (pattern analysis) once a working example exists: a previous commit, another
    config, a reference run. Each side may give a git ref (omitted: the working tree), config and
    launcher files, an interpreter (its installed packages are compared), env, or the run_id of a
    recorded run (its command and env are taken). Code differs by git hunk, configs by flattened
    key (trainer.optimizer.lr, list items as key[i]), launch scripts by distributed setting
    (nproc_per_node, nnodes, world_size, backend, env overrides). Differences touching what the
    session's diagnosis names are flagged suspect.
    """

    good: SetupSide = Field(default_factory=SetupSide, description="The setup that works.")
    bad: SetupSide = Field(default_factory=SetupSide, description="The setup that fails.")
    focus: list[str] = Field(default_factory=list,
                             description="Extra keywords whose differences are flagged suspect (besides the "
                                         "session's keywords and diagnosis).")
    session_id: str | None = Field(None, description="Session to record the differences in (advances Phase 2).")


class SideInfo(BaseModel):
    tree: str = Field(description="The commit (short sha) or 'working tree'.")
    ref: str | None = None
    python: str | None = None
    run_id: str | None = None
    command: str | None = None


class CompareSetupsResult(ToolResult):
    good: SideInfo
    bad: SideInfo
    differences: list[Difference] = Field(description="The differences (all of them unless full_list_path is set).")
    summary_counts: dict[str, int] = Field(alias="summary", description="Number of differences per kind.")
    total: int
    shown: int
    suspect: int
    full_list_path: str | None = Field(None, description="JSON file holding every difference when the list is long.")
    compared: list[str] = Field(default_factory=list, description="What was compared (files, interpreters, env).")
    notes: list[str] = Field(default_factory=list, description="Files that could not be parsed and other remarks.")
    diff_stat: str = ""

    def summary(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in self.summary_counts.items() if v) or "none"
        lines = [
            f"compare_setups: {self.total} difference(s) between good ({_side_text(self.good)}) "
            f"and bad ({_side_text(self.bad)}): {counts}; {self.suspect} suspect.",
        ]
        if self.full_list_path:
            lines.append(f"Showing {self.shown} of {self.total}; the full list is in {self.full_list_path}.")
        for diff in self.differences[:40]:
            flag = "SUSPECT " if diff.suspect else ""
            lines.append(f"- {flag}[{diff.kind}] {diff.key}: {_short(diff.good)} -> {_short(diff.bad)}"
                         + (f"  ({diff.why})" if diff.why else ""))
        if len(self.differences) > 40:
            lines.append(f"- … {len(self.differences) - 40} more in `differences`"
                         + (f" and {self.full_list_path}" if self.full_list_path else ""))
        if self.diff_stat:
            lines += ["", "Diff stat:", bounded(self.diff_stat, 1500)]
        for note in self.notes:
            lines.append(f"Note: {note}")
        return "\n".join(lines)


def _side_text(info: SideInfo) -> str:
    parts = [info.ref or info.tree]
    if info.run_id:
        parts.append(f"run {info.run_id}")
    if info.python:
        parts.append(info.python)
    return ", ".join(parts)


def _short(value: str | None) -> str:
    if value is None:
        return "(absent)"
    flat = value.replace("\n", "⏎ ")
    return flat if len(flat) <= 80 else flat[:77] + "…"


async def compare_setups(inp: CompareSetupsInput, ctx: ToolContext) -> CompareSetupsResult:
    ws = ctx.workspace
    state: SessionState | None = None
    store = SessionStore(ws)
    if inp.session_id:
        state = require_open(store, inp.session_id)
    good = resolve_side("good", inp.good, ws)
    bad = resolve_side("bad", inp.bad, ws)
    pairs = _file_pairs(good, bad, ws)
    _require_something(good, bad, pairs)

    differences: list[Difference] = []
    compared: list[str] = []
    notes: list[str] = []
    repo = gitrepo.repo_for(ws.root)
    code = CodeDiff()
    if good.sha != bad.sha and repo is not None:
        await ctx.progress(0, 5, "diffing code")
        import anyio

        code = await anyio.to_thread.run_sync(code_diff, repo, ws.root, good.sha, bad.sha)
        compared.append(f"code: {good.tree} vs {bad.tree} ({len(code.files)} file(s) changed)")
        if inp.good.files is None and inp.bad.files is None:
            pairs += [(p, p) for p in _changed_configs(code, ws) if (p, p) not in pairs]
    await ctx.progress(1, 5, "comparing files")
    if repo is None and (good.sha or bad.sha):
        raise UsageError(f"{ws.root} is not a git repository, so refs cannot be compared.", "omit ref")
    for good_path, bad_path in pairs:
        differences += _compare_file(good, bad, good_path, bad_path, ws, repo, compared, notes,
                                     explicit=inp.good.files is not None or inp.bad.files is not None)
    differences += _compare_commands(good, bad, compared, notes)
    differences += _compare_env(good, bad, compared)
    await ctx.progress(2, 5, "comparing installed packages")
    differences += await _compare_packages(good, bad, ws, compared, notes)
    differences += code.differences
    for side in (good, bad):
        notes += side.notes

    mark(differences, focus_from(state, inp.focus))
    differences = _ordered(differences)
    counts = {kind: 0 for kind in KINDS}
    counts.update(Counter(d.kind for d in differences))
    shown, full_path = _bounded_list(differences, ws)
    result = CompareSetupsResult(
        good=_info(good), bad=_info(bad), differences=shown, summary=counts, total=len(differences),
        shown=len(shown), suspect=sum(d.suspect for d in differences), full_list_path=full_path,
        compared=compared, notes=notes, diff_stat=bounded(code.stat, 4000),
    )
    if inp.session_id:
        from rootcause.tools.record.findings import CompareSetupsEvidence, dump

        evidence = CompareSetupsEvidence(
            summary=dict(counts), total=result.total, full_list_path=full_path, suspect_count=result.suspect,
            suspect=[f"[{d.kind}] {d.key}" for d in differences if d.suspect][:30],
            good=result.good.model_dump(), bad=result.bad.model_dump())
        store.record(inp.session_id, "compare_setups", evidence.render(), dump(evidence), phase=2)
    await ctx.progress(5, 5, "done")
    return result


def _info(side: Side) -> SideInfo:
    import shlex

    return SideInfo(tree=side.tree, ref=side.spec.ref, python=str(side.python) if side.python else None,
                    run_id=side.spec.run_id, command=shlex.join(side.argv) if side.argv else None)


# ---------------------------------------------------------------- what is compared


def _file_pairs(good: Side, bad: Side, ws) -> list[tuple[Path, Path]]:
    g_files, b_files = good.spec.files, bad.spec.files
    if g_files is not None or b_files is not None:
        g_list = [ws.resolve(f, what="file") for f in (g_files if g_files is not None else b_files or [])]
        b_list = [ws.resolve(f, what="file") for f in (b_files if b_files is not None else g_files or [])]
        if len(g_list) != len(b_list):
            raise UsageError(f"good lists {len(g_list)} file(s) and bad lists {len(b_list)}: they are compared "
                             "pairwise in order.", "give the same number of files on both sides, or files on one side")
        return list(zip(g_list, b_list, strict=True))
    g_named, b_named = command_files(good, ws), command_files(bad, ws)
    pairs: list[tuple[Path, Path]] = []
    if g_named and len(g_named) == len(b_named):
        # Two runs naming the same number of files: the i-th config of one is the i-th of the other.
        pairs = list(zip(g_named, b_named, strict=True))
    else:
        pairs = [(p, p) for p in dict.fromkeys([*g_named, *b_named])]
    for path in project_files(ws):
        if (path, path) not in pairs:
            pairs.append((path, path))
    return pairs


def _changed_configs(code: CodeDiff, ws) -> list[Path]:
    out = []
    for name in code.files:
        if configs.file_format(name) in {"yaml", "json", "toml", "script", "lock", "requirements"}:
            out.append(ws.root / name)
    return out


def _require_something(good: Side, bad: Side, pairs: list[tuple[Path, Path]]) -> None:
    if good.sha != bad.sha or good.python or bad.python or good.env is not None or bad.env is not None:
        return
    if good.argv or bad.argv or any(g != b for g, b in pairs):
        return
    raise UsageError(
        "good and bad describe the same setup (the same tree, no interpreter, env or run on either side): "
        "there is nothing to compare.",
        "give the working side a ref (e.g. good={'ref': 'HEAD~1'}), a run_id, env, python, or other files",
    )


# ---------------------------------------------------------------- files


def _compare_file(good: Side, bad: Side, good_path: Path, bad_path: Path, ws, repo, compared: list[str],
                  notes: list[str], explicit: bool) -> list[Difference]:
    g_rel, b_rel = ws.relative(good_path), ws.relative(bad_path)
    label = g_rel if g_rel == b_rel else f"{g_rel} vs {b_rel}"
    g_text = _read(repo, ws, good.sha, good_path)
    b_text = _read(repo, ws, bad.sha, bad_path)
    if g_text is None and b_text is None:
        if explicit:
            notes.append(f"{label}: not found on either side")
        return []
    compared.append(f"file {label}")
    if g_text is None or b_text is None:
        present = b_text if g_text is None else g_text
        assert present is not None
        text = f"present ({present.count(chr(10)) + 1} lines)"
        return [Difference(kind="config", key=label, file=b_rel, good=None if g_text is None else text,
                           bad=None if b_text is None else text)]
    if g_text == b_text:
        return []
    fmt = configs.file_format(b_rel)
    prefix = f"{label}:"
    try:
        if fmt in {"yaml", "json", "toml"}:
            return diff_maps("config", prefix, configs.flatten(configs.parse(g_text, fmt)),
                             configs.flatten(configs.parse(b_text, fmt)), file=b_rel)
        if fmt in {"lock", "requirements"}:
            return diff_maps("package", prefix, locks.packages_of(g_text, fmt), locks.packages_of(b_text, fmt),
                             file=b_rel)
    except configs.ConfigParseError as exc:
        notes.append(f"{label}: could not be parsed ({exc}); compared line by line instead")
    if fmt == "script":
        return _compare_scripts(prefix, g_text, b_text, b_rel)
    return [Difference(kind="config", key=f"{prefix}{where}", file=b_rel, good=old, bad=new)
            for where, old, new in configs.text_changes(g_text, b_text)]


def _read(repo, ws, sha: str | None, path: Path) -> str | None:
    if sha is None or repo is None:
        return read_at(repo, ws.root, None, path) if path.is_file() else None
    return read_at(repo, ws.root, sha, path)


def _compare_scripts(prefix: str, good: str, bad: str, file: str) -> list[Difference]:
    g_settings, g_other = parse_script(good)
    b_settings, b_other = parse_script(bad)
    out = diff_maps("launcher", prefix, g_settings, b_settings, file=file)
    only_g = [line for line in g_other if line not in b_other]
    only_b = [line for line in b_other if line not in g_other]
    if only_g or only_b:
        out.append(Difference(kind="launcher", key=f"{prefix}other commands", file=file,
                              good="\n".join(only_g) or None, bad="\n".join(only_b) or None))
    return out


# ---------------------------------------------------------------- command, env, packages


def _compare_commands(good: Side, bad: Side, compared: list[str], notes: list[str]) -> list[Difference]:
    if good.argv is None or bad.argv is None:
        if good.argv is not None or bad.argv is not None:
            notes.append("only one side is a recorded run: its command is not compared (give run_id on both sides)")
        return []
    import shlex

    compared.append("commands of the two runs")
    out: list[Difference] = []
    if good.argv != bad.argv:
        out.append(Difference(kind="command", key="command", good=shlex.join(good.argv), bad=shlex.join(bad.argv)))
    if good.cwd != bad.cwd:
        out.append(Difference(kind="command", key="cwd", good=str(good.cwd), bad=str(bad.cwd)))
    for diff in diff_maps("command", "command:", parse_invocation(good.argv), parse_invocation(bad.argv)):
        name = diff.key.removeprefix("command:")
        if name in _LAUNCHER_KEYS or name.startswith(_LAUNCHER_PREFIXES):
            diff.kind = "launcher"
        out.append(diff)
    return out


def _compare_env(good: Side, bad: Side, compared: list[str]) -> list[Difference]:
    if good.env is None and bad.env is None:
        return []
    compared.append("environment variables")
    out = diff_maps("env", "", good.env or {}, bad.env or {})
    for diff in out:
        diff.good, diff.bad = redact(diff.key, diff.good), redact(diff.key, diff.bad)
    return out


async def _compare_packages(good: Side, bad: Side, ws, compared: list[str], notes: list[str]) -> list[Difference]:
    if good.python is None and bad.python is None:
        return []
    from rootcause.tools.run.interpreters import choose_interpreter, freeze

    default = choose_interpreter(ws, None)  # the one rule: the project's .venv, else rootcause's own (said so)
    g_python = good.python or default.path
    b_python = bad.python or default.path
    for side in (good, bad):
        if side.python is None:
            notes.append(f"{side.name} gives no python: {default.describe()} is used for it")
    if g_python == b_python:
        notes.append(f"both sides use the interpreter {g_python}: packages not compared")
        return []
    compared.append(f"installed packages: {g_python} vs {b_python}")
    return diff_maps("package", "", await freeze(ws, g_python), await freeze(ws, b_python))


# ---------------------------------------------------------------- bounding


def _ordered(differences: list[Difference]) -> list[Difference]:
    """Suspect first, then by kind (code, config, launcher, command, env, package), each in discovery order."""
    rank = {kind: i for i, kind in enumerate(KINDS)}
    return sorted(differences, key=lambda d: (not d.suspect, rank[d.kind]))


def _bounded_list(differences: list[Difference], ws) -> tuple[list[Difference], str | None]:
    full = [d.model_dump(mode="json") for d in differences]
    if len(json.dumps(full)) <= RESULT_BUDGET:
        return differences, None
    name = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
    path = ws.state_dir("compare") / f"{name}.json"
    path.write_text(json.dumps({"total": len(full), "differences": full}, indent=1, ensure_ascii=False),
                    encoding="utf-8")
    shown: list[Difference] = []
    used = 0
    for diff in differences:
        short = diff.model_copy(update={
            "good": bounded(diff.good, VALUE_LIMIT) if diff.good else diff.good,
            "bad": bounded(diff.bad, VALUE_LIMIT) if diff.bad else diff.bad,
        })
        size = len(short.model_dump_json())
        if used + size > RESULT_BUDGET:
            break
        shown.append(short)
        used += size
    return shown, ws.relative(path)

"""check_constraints: rank the project's knowledge against a symptom, flag guarded edits, run codegen checks."""

from __future__ import annotations

from pathlib import Path

import anyio
from pydantic import BaseModel, Field
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult
from rootcause.tools.knowledge.checklists import Checklist, applicable_checklists
from rootcause.tools.knowledge.codegen import CodegenCheck, run_codegen_check
from rootcause.tools.knowledge.context import RunFacts, facts_from_text
from rootcause.tools.knowledge.entries import Entry
from rootcause.tools.knowledge.folder import knowledge_dir
from rootcause.tools.knowledge.guards import GuardViolation, collect_guards, violations, working_tree_changes
from rootcause.tools.knowledge.index import Hit, Index, load_index
from rootcause.tools.knowledge.pitfalls import PitfallMatch, pitfall, rank_pitfalls
from rootcause.tools.knowledge.placeholders import is_placeholder
from rootcause.tools.record.evidence import ReproduceEvidence
from rootcause.tools.record.knowledge_evidence import ConstraintsEvidence
from rootcause.tools.record.registry import evidence_of
from rootcause.tools.record.store import SessionState, SessionStore
from rootcause.tools.run.scripts import script_text, scripts_inside
from rootcause.tools.vocabulary.words import symptom_hits

MAX_TOP_K = 50
MAX_SYMPTOM = 20_000
PLACEHOLDER_SLACK = 8
PITFALL_LIMIT = 5
LOG_HEAD_BYTES = 256_000


class CheckConstraintsInput(BaseModel):
    """Phase 1 "check constraints first": rank the project's knowledge entries (.agents/knowledge/*.md)
    against the symptom, list the built-in pitfalls and checklists that apply, and flag changed files
    that a knowledge entry marks as generated (not to be edited by hand). With check_codegen, also run
    the project's codegen check. With a session, the symptom defaults to the session's symptom and
    diagnosis and the evidence is recorded (Phase 1)."""

    symptom: str | None = Field(
        None, description="The failure in words or the key error line. Default: the session's symptom plus "
        "the diagnosis keywords and message.")
    session_id: str | None = Field(None, description="Session id from start_session: records evidence, boosts "
                                   "entries of the diagnosis category.")
    top_k: int = Field(5, ge=1, le=MAX_TOP_K, description="How many ranked entries to return (1-50).")
    paths: list[str] | None = Field(
        None, description="Changed files to check against generated-path guards (relative to the root). "
        "Default: the working tree's changes (staged, unstaged, untracked).")
    check_codegen: bool = Field(False, description="Run the project's codegen check (a Makefile target such as "
                                "check-patchgen, or codegen_command) and report codegen_stale.")
    codegen_command: str | None = Field(None, description="The codegen check command to run with check_codegen, "
                                        "when it is not a detectable Makefile target.")
    knowledge_dir: str | None = Field(
        None, description="Knowledge folder inside the root. Default: $ROOTCAUSE_KNOWLEDGE_DIR, else "
        ".agents/knowledge.")
    facts: RunFacts | None = Field(
        None, description="What you know of the failing run (backend, device, launcher, distributed, exit: zero | "
        "nonzero); a pitfall a known fact rules out is dropped. Default: read from the session's reproduced run "
        "and the symptom.")


class Match(BaseModel):
    title: str
    section: str
    file: str
    line: int
    score: float
    excerpt: str
    why: list[str]
    number: int | None = None
    kind: str


class CheckConstraintsResult(ToolResult):
    query: str
    category: str | None = None
    knowledge_dir: str
    files: list[str]
    entries: int
    matches: list[Match]
    pitfalls: list[PitfallMatch] = Field(description="Built-in pitfalls that fit the symptom, best first; one the "
                                         "project's own matches already document is left out (see notes).")
    checklists: list[Checklist]
    changed_files: int
    guards: list[str] = Field(description="Every generated-path glob found in the knowledge.")
    guard_violations: list[GuardViolation]
    codegen_stale: bool | None = None
    codegen: CodegenCheck | None = None
    facts: RunFacts = Field(default_factory=RunFacts,
                            description="The run facts the pitfalls were weighed by, and where they came from.")
    facts_source: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        lines = [f"Knowledge: {self.entries} entries in {len(self.files)} file(s) under {self.knowledge_dir}"
                 + (f" — query: {self.query[:120]!r}" if self.query else " — no symptom given, matches skipped")]
        if self.facts.known():
            lines.append(f"Run facts: {self.facts.describe()} (from {', '.join(self.facts_source)})")
        for m in self.matches:
            lines.append(f"- {m.score:.1f} {m.file}:{m.line} {m.title} [{m.section}] — {'; '.join(m.why)[:160]}")
        if self.query and not self.matches:
            lines.append("- no knowledge entry matches the symptom")
        for p in self.pitfalls:
            lines.append(f"Pitfall: {p.title} [{p.name}] — check: {p.check[:300]}")
        if self.checklists:
            lines.append("Checklists: " + ", ".join(c.name for c in self.checklists))
        for v in self.guard_violations:
            lines.append(f"GUARD: {v.path} matches {v.glob} — '{v.title}' ({v.file}:{v.line})")
        if self.guards and not self.guard_violations:
            lines.append(f"Guards: none of {self.changed_files} changed file(s) is under {', '.join(self.guards)}")
        if self.codegen is not None:
            if self.codegen.ran:
                state = "STALE" if self.codegen.stale else "fresh"
                lines.append(f"Codegen check ({' '.join(self.codegen.command or [])}): {state}, exit "
                             f"{self.codegen.exit_code}, log {self.codegen.log_path}")
                if self.codegen.stale:
                    lines.append(self.codegen.excerpt[-800:])
            else:
                lines.append(f"Codegen check: {self.codegen.source}")
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)


def _session_query(state: SessionState) -> tuple[str, str]:
    """Symptom text and category from the session: its symptom plus the latest diagnosis."""
    parts = [state.symptom, " ".join(state.keywords)]
    category = state.category
    for ev in reversed(state.evidence):
        typed = evidence_of(ev.tool, ev.data)
        diagnosis = typed.found_diagnosis() if typed is not None else None
        if diagnosis is not None:
            parts += [" ".join(diagnosis.keywords), diagnosis.exception_type or "", (diagnosis.message or "")[:2000]]
            category = diagnosis.category or category
            break
    return "\n".join(p for p in parts if p.strip()), category


def _session_facts(state: SessionState, root: Path) -> RunFacts:
    """What the session's latest reproduced run says: its command, exit, interpreter, Slurm, and its log's words."""
    for ev in reversed(state.evidence):
        typed = evidence_of(ev.tool, ev.data)
        if not isinstance(typed, ReproduceEvidence) or not typed.runs:
            continue
        texts = [" ".join(typed.command)]
        for run in typed.runs[:2]:
            log = root / run.log_path
            try:
                with open(log, "rb") as fh:
                    texts.append(fh.read(LOG_HEAD_BYTES).decode("utf-8", "replace"))
            except OSError:
                pass
        facts = facts_from_text("\n".join(texts)).model_dump()
        if facts["backend"] is None:  # the script the command runs names its backend (init_process_group("gloo"))
            facts["backend"] = facts_from_text(_scripts_text(typed.command, root)).backend
        failing = [r for r in typed.runs if r.outcome != "pass"] or typed.runs
        facts["exit"] = "zero" if all(r.exit_code == 0 for r in failing) else "nonzero"
        if any(r.launcher == "slurm" for r in typed.runs):
            facts["launcher"], facts["distributed"] = "slurm", True
        if typed.environment is not None and typed.environment.cuda_available is False:
            facts["device"] = "cpu"
        return RunFacts.model_validate(facts)
    return RunFacts()


def _scripts_text(command: list[str], root: Path) -> str:
    """The head of every Python file inside the root that the command names."""
    texts = (script_text(path, LOG_HEAD_BYTES) for path in scripts_inside(command, root))
    return "\n".join(t for t in texts if t is not None)


def _facts(inp: CheckConstraintsInput, state: SessionState | None, symptom: str, root: Path
           ) -> tuple[RunFacts, list[str]]:
    """The caller's facts first, then the session's reproduced run, then the symptom's own words."""
    layers = [("the arguments", inp.facts or RunFacts()),
              ("the session's reproduced run", _session_facts(state, root) if state is not None else RunFacts()),
              ("the symptom", facts_from_text(symptom))]
    facts, source = RunFacts(), []
    for name, layer in layers:
        if set(layer.known()) - set(facts.known()):
            source.append(name)
        facts = facts.merged(layer)
    return facts, source


def _search(folder: Path, root: Path, query: str, top_k: int, category: str | None,
            paths: list[str] | None) -> tuple[Index, list, list[GuardViolation], list[str], int]:
    index = load_index(folder, root)
    hits: list[Hit] = []
    if query.strip():
        # The init templates' example entries are never an answer: rank a few more, drop them.
        hits = [h for h in index.search(query, top_k + PLACEHOLDER_SLACK, category)
                if not is_placeholder(h.entry)][:top_k]
    guards = index.derived.get("guards")
    if guards is None:
        guards = index.derived["guards"] = collect_guards(index.files)
    changed = paths if paths is not None else working_tree_changes(root)
    knowledge_rel = {f for f in index.files}
    changed = [p for p in changed if p not in knowledge_rel and not p.startswith(".rootcause/")]
    return index, hits, violations(guards, changed), [g.glob for g in guards], len(changed)


async def check_constraints(inp: CheckConstraintsInput, ctx: ToolContext) -> CheckConstraintsResult:
    store = SessionStore(ctx.workspace)
    state = store.load(inp.session_id) if inp.session_id else None
    if not 1 <= inp.top_k <= MAX_TOP_K:
        raise UsageError(f"top_k must be between 1 and {MAX_TOP_K}, got {inp.top_k}.", "use e.g. top_k=5")
    symptom = (inp.symptom or "").strip()
    if len(symptom) > MAX_SYMPTOM:
        raise UsageError(f"symptom is {len(symptom)} characters long.",
                         "give the key error lines; pass whole logs to diagnose_log first")
    category: str | None = None
    if state is not None:
        session_text, category = _session_query(state)
        symptom = symptom or session_text
    if category is None and symptom:
        from rootcause.tools.judge.classify import classify_text

        category = classify_text(symptom)[0]
    folder = knowledge_dir(ctx.workspace, inp.knowledge_dir)
    if inp.knowledge_dir and not folder.is_dir():
        raise UsageError(f"knowledge folder {inp.knowledge_dir!r} does not exist under the root.",
                         "omit knowledge_dir for the default .agents/knowledge, or name an existing folder")
    paths = None
    if inp.paths is not None:
        paths = [ctx.workspace.relative(ctx.workspace.resolve(p, what="path")) for p in inp.paths]
    index, hits, guard_violations, guard_globs, changed = await anyio.to_thread.run_sync(
        _search, folder, ctx.root, symptom, inp.top_k, category, paths)
    query_hits = symptom_hits(symptom) if symptom else {}
    notes = list(index.notes)
    facts, facts_source = _facts(inp, state, symptom, ctx.root)
    pitfalls, documented = _pitfalls(symptom, category, hits, bool(guard_violations), _links(index), facts)
    notes += [f"built-in pitfall {name} is not listed: the project documents it ({where})"
              for name, where in documented]
    if not index.files:
        notes.append(f"no knowledge files in {ctx.workspace.relative(folder)}: only the built-in pitfalls and "
                     "checklists apply; capture_knowledge creates the files")
    codegen = await run_codegen_check(ctx, inp.codegen_command) if inp.check_codegen else None
    if codegen is not None and codegen.ran and not guard_globs:
        notes.append("the knowledge marks no generated paths; the codegen check ran anyway")
    result = CheckConstraintsResult(
        query=symptom, category=category, knowledge_dir=ctx.workspace.relative(folder), files=sorted(index.files),
        entries=len(index.entries),
        matches=[Match(title=h.entry.title, section=h.entry.section, file=h.entry.file, line=h.entry.line,
                       score=h.score, excerpt=h.entry.excerpt(), why=h.why, number=h.entry.number,
                       kind=h.entry.kind) for h in hits],
        pitfalls=pitfalls,
        checklists=applicable_checklists(query_hits, category, state.checklists if state else []),
        changed_files=changed, guards=guard_globs, guard_violations=guard_violations,
        codegen_stale=codegen.stale if codegen is not None else None, codegen=codegen, notes=notes,
        facts=facts, facts_source=facts_source,
    )
    if state is not None:
        evidence = _evidence(result, [name for name, _ in documented])
        store.record(state.session_id, "check_constraints", evidence.render(), evidence.model_dump(mode="json"),
                     phase=1)
    return result


def _links(index: Index) -> dict[str, Entry]:
    """The index's pitfall links, computed once per parsed index."""
    from rootcause.tools.knowledge.dedupe import pitfall_links

    links = index.derived.get("pitfall_links")
    if links is None:
        links = index.derived["pitfall_links"] = pitfall_links([e for e in index.entries if not is_placeholder(e)])
    return links


def _pitfalls(symptom: str, category: str | None, hits: list[Hit], guard_hit: bool,
              links: dict[str, Entry], facts: RunFacts) -> tuple[list[PitfallMatch], list[tuple[str, str]]]:
    """Ranked built-in pitfalls, minus those the project already documents (the project first): any entry
    that links the pitfall by id, or a matching entry that is a near-duplicate of it."""
    from rootcause.tools.knowledge.dedupe import documenting_entry

    ranked = rank_pitfalls(symptom, category, PITFALL_LIMIT, facts) if symptom else []
    if guard_hit and "generated_model_patches" not in {p.name for p in ranked}:
        generated = pitfall("generated_model_patches")
        ranked.append(PitfallMatch(name=generated.id, title=generated.title, text=generated.cause,
                                   why="a changed file is under a generated-path guard", category=generated.category,
                                   check=generated.check, fix=generated.fix, source=generated.source_url))
    project = [h.entry for h in hits]
    kept, documented = [], []
    for match in ranked:
        entry = documenting_entry(match.name, match.title, match.text + "\n" + match.fix, links, project)
        if entry is not None:
            documented.append((match.name, f"{entry.file}:{entry.line}"))
        else:
            kept.append(match)
    return kept, documented


def _evidence(result: CheckConstraintsResult, documented: list[str]) -> ConstraintsEvidence:
    return ConstraintsEvidence.model_validate({
        "matches": [{"title": m.title, "file": m.file, "line": m.line, "score": m.score} for m in result.matches],
        "pitfalls": [p.name for p in result.pitfalls],
        "documented_pitfalls": documented,
        "guard_violations": [v.model_dump() for v in result.guard_violations],
        "codegen_stale": result.codegen_stale,
    })

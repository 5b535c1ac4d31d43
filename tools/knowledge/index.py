"""BM25 over knowledge entries, with concept tokens for synonyms; parsed files cached by mtime.

Fields are weighted by repetition (title x3, section x1, body x1: a BM25F shortcut).
A query is tokenised like the entries; the session's diagnosis category adds the
concept tokens of its kind of failure. Section-intro entries weigh less than real entries.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rootcause.tools.knowledge.entries import Entry, ParsedFile, parse_markdown
from rootcause.tools.knowledge.folder import markdown_files
from rootcause.tools.vocabulary.words import CONCEPT_PREFIX, category_concepts, concept_hits, stem, tokens, words

K1 = 1.2
B = 0.75
TITLE_WEIGHT = 3
KIND_WEIGHT = {"numbered": 1.0, "heading": 1.0, "bullet": 1.0, "section": 0.7}
CATEGORY_BOOST = 1.5


@dataclass
class Hit:
    entry: Entry
    score: float
    why: list[str]
    terms: list[str] = field(default_factory=list)


@dataclass
class Index:
    entries: list[Entry]
    files: dict[str, ParsedFile]
    notes: list[str] = field(default_factory=list)
    postings: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    lengths: list[int] = field(default_factory=list)
    avg_len: float = 1.0
    derived: dict[str, object] = field(default_factory=dict)
    """Per-index memo for things computed from the entries (e.g. guards); dropped with the index."""

    @classmethod
    def build(cls, files: dict[str, ParsedFile], notes: list[str]) -> Index:
        entries = [e for parsed in files.values() for e in parsed.entries]
        index = cls(entries, files, notes)
        postings: dict[str, list[tuple[int, int]]] = {}
        for doc, entry in enumerate(entries):
            counts = Counter(tokens(entry.title) * TITLE_WEIGHT + tokens(entry.section) + tokens(entry.body))
            index.lengths.append(sum(counts.values()))
            for term, tf in counts.items():
                postings.setdefault(term, []).append((doc, tf))
        index.postings = postings
        index.avg_len = (sum(index.lengths) / len(entries)) if entries else 1.0
        return index

    def idf(self, term: str) -> float:
        n = len(self.postings.get(term, ()))
        return math.log(1 + (len(self.entries) - n + 0.5) / (n + 0.5))

    def search(self, query: str, top_k: int = 5, category: str | None = None) -> list[Hit]:
        weights: Counter[str] = Counter(tokens(query))
        boosted = {CONCEPT_PREFIX + c for c in category_concepts(category)}
        for term in boosted:
            weights[term] += CATEGORY_BOOST
        scores: dict[int, float] = {}
        matched: dict[int, list[str]] = {}
        for term, weight in weights.items():
            plist = self.postings.get(term)
            if not plist:
                continue
            idf = self.idf(term)
            for doc, tf in plist:
                norm = tf * (K1 + 1) / (tf + K1 * (1 - B + B * self.lengths[doc] / self.avg_len))
                scores[doc] = scores.get(doc, 0.0) + weight * idf * norm
                matched.setdefault(doc, []).append(term)
        ranked = sorted(((s * KIND_WEIGHT.get(self.entries[d].kind, 1.0), d) for d, s in scores.items()),
                        key=lambda pair: (-pair[0], self.entries[pair[1]].file, self.entries[pair[1]].line))
        originals = {stem(w.lower()): w for w in query.replace("_", " ").split()}
        for w in words(query):
            originals.setdefault(w, w)
        query_hits = concept_hits(query)
        hits = []
        for score, doc in ranked[:top_k]:
            entry = self.entries[doc]
            hits.append(Hit(entry, round(score, 3), _why(matched[doc], originals, query_hits, entry, boosted,
                                                        category), matched[doc]))
        return hits


def _why(terms: list[str], originals: dict[str, str], query_hits: dict[str, str], entry: Entry,
         boosted: set[str], category: str | None) -> list[str]:
    reasons: list[str] = []
    plain = [originals.get(t, t) for t in terms if not t.startswith(CONCEPT_PREFIX)]
    if plain:
        reasons.append("terms: " + ", ".join(dict.fromkeys(plain)))
    entry_hits: dict[str, str] | None = None
    for term in terms:
        if not term.startswith(CONCEPT_PREFIX):
            continue
        name = term[len(CONCEPT_PREFIX):]
        if entry_hits is None:
            entry_hits = concept_hits(f"{entry.title}\n{entry.section}\n{entry.body}")
        said = query_hits.get(name)
        found = entry_hits.get(name, "?")
        if said is not None:
            reasons.append(f"{name}: '{said}' ~ '{found}'" if said != found else f"{name}: '{found}'")
        if term in boosted:
            reasons.append(f"category {category} -> {name} ('{found}')")
    return reasons


class _Cache:
    """Parsed files per folder, re-parsed only when a file's (mtime_ns, size) changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[Path, tuple[tuple[int, int], ParsedFile]] = {}
        self._indexes: dict[Path, tuple[tuple, Index]] = {}

    def index(self, folder: Path, root: Path, extra: list[Path] | None = None) -> Index:
        paths = markdown_files(folder, root) + list(extra or [])
        signature = []
        for path in paths:
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            signature.append((str(path), st.st_mtime_ns, st.st_size))
        key = tuple(signature)
        with self._lock:
            cached = self._indexes.get(folder)
            if cached and cached[0] == key:
                return cached[1]
            files: dict[str, ParsedFile] = {}
            notes: list[str] = []
            for name, mtime, size in signature:
                path = Path(name)
                parsed = self._parse(path, root, (mtime, size), notes)
                if parsed is not None:
                    files[parsed.file] = parsed
            index = Index.build(files, notes)
            self._indexes[folder] = (key, index)
            return index

    def _parse(self, path: Path, root: Path, stamp: tuple[int, int], notes: list[str]) -> ParsedFile | None:
        cached = self._files.get(path)
        if cached and cached[0] == stamp:
            return cached[1]
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            notes.append(f"{_rel(path, root)} skipped: not valid UTF-8")
            return None
        except OSError as exc:
            notes.append(f"{_rel(path, root)} skipped: {exc.strerror}")
            return None
        parsed = parse_markdown(text, _rel(path, root))
        self._files[path] = (stamp, parsed)
        return parsed

    def parse(self, path: Path, root: Path, text: str) -> ParsedFile:
        """Parse text of path (already read by the caller), through the same cache."""
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            cached = self._files.get(path)
            if cached and cached[0] == stamp:
                return cached[1]
            parsed = parse_markdown(text, _rel(path, root))
            self._files[path] = (stamp, parsed)
            return parsed

    def clear(self) -> None:
        with self._lock:
            self._files.clear()
            self._indexes.clear()


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


CACHE = _Cache()


def load_index(folder: Path, root: Path) -> Index:
    return CACHE.index(folder, root)

"""What an edit of one Python file changed, as logical changes: the symbols it touched, grouped.

A symbol is a top-level function, a class (its methods and class attributes one by one), a
module-level assignment, one imported name, or another module-level statement. Touched symbols
are one change when one uses a name the other defines (a helper and its call sites; an import
and every symbol using the name it binds) or when both start or stop using the same name (call
sites moved from one API to another). Comments and formatting change no symbol.
"""

from __future__ import annotations

import ast
import builtins
from collections import Counter
from dataclasses import dataclass

_BUILTINS = frozenset(dir(builtins))
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass
class Symbol:
    key: str  # pairs the old and the new version: "def load", "Model.forward", "import json"
    label: str  # for people: "load()", "Model.forward()", "import json"
    dump: str  # the code without positions and comments
    binds: frozenset[str]
    uses: Counter[str]  # dotted names it reads and does not define itself ("json.load", "Model.helper")
    line: int
    is_import: bool = False
    parent: str | None = None  # the key of the class holding a member


@dataclass
class Touched:
    old: Symbol | None
    new: Symbol | None

    @property
    def symbol(self) -> Symbol:
        return self.new or self.old  # type: ignore[return-value]

    def changed_uses(self) -> set[str]:
        old = self.old.uses if self.old else Counter()
        new = self.new.uses if self.new else Counter()
        return {name for name in old.keys() | new.keys() if old[name] != new[name]}

    def all_uses(self) -> set[str]:
        return set(self.old.uses if self.old else ()) | set(self.new.uses if self.new else ())

    def binds(self) -> frozenset[str]:
        return (self.old.binds if self.old else frozenset()) | (self.new.binds if self.new else frozenset())


def logical_changes(old: str, new: str) -> list[list[str]] | None:
    """The edit as groups of touched symbols (labels), one group per logical change; None when either side
    does not parse. An empty list: no symbol changed (comments, blank lines, formatting)."""
    try:
        before, after = _symbols(ast.parse(old)), _symbols(ast.parse(new))
    except (SyntaxError, ValueError, RecursionError):
        return None
    touched = _touched(before, after)
    parent = list(range(len(touched)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(i: int, others: set[int]) -> None:
        for j in others:
            parent[find(i)] = find(j)

    for i, j in _related(touched):
        join(i, {j})
    groups: dict[int, list[Touched]] = {}
    for i, t in enumerate(touched):
        groups.setdefault(find(i), []).append(t)
    ordered = sorted(groups.values(), key=lambda g: min(t.symbol.line for t in g))
    return [[t.symbol.label for t in sorted(g, key=lambda t: t.symbol.line)] for g in ordered]


def _related(touched: list[Touched]) -> list[tuple[int, int]]:
    """Pairs of touched symbols that are one change: a defines what b uses (an import: b uses it at all; anything
    else: b starts or stops using it), or both start or stop using one name, or a is the new or removed class
    holding the member b. Indexed by name, so a large edit stays linear."""
    changed_by: dict[str, set[int]] = {}  # dotted name and each of its prefixes -> symbols changing its use
    used_by: dict[str, set[int]] = {}
    exact: dict[str, set[int]] = {}
    members: dict[str, set[int]] = {}
    for i, t in enumerate(touched):
        for use in t.changed_uses():
            exact.setdefault(use, set()).add(i)
            for prefix in _prefixes(use):
                changed_by.setdefault(prefix, set()).add(i)
        for use in t.all_uses():
            for prefix in _prefixes(use):
                used_by.setdefault(prefix, set()).add(i)
        if t.symbol.parent is not None:
            members.setdefault(t.symbol.parent, set()).add(i)
    pairs: list[tuple[int, int]] = []
    for i, t in enumerate(touched):
        for bound in t.binds():
            pairs += [(i, j) for j in (used_by if t.symbol.is_import else changed_by).get(bound, ())]
        if t.old is None or t.new is None:
            pairs += [(i, j) for j in members.get(t.symbol.key, ())]
    for group in exact.values():
        first = min(group)
        pairs += [(first, j) for j in group]
    return pairs


def _prefixes(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts) + 1)]


def _touched(before: list[Symbol], after: list[Symbol]) -> list[Touched]:
    """Symbols that differ, paired by key; an unchanged symbol (same key and code) drops out."""
    same = Counter((s.key, s.dump) for s in before) & Counter((s.key, s.dump) for s in after)
    left_old = _drop(before, same.copy())
    left_new = _drop(after, same.copy())
    out: list[Touched] = []
    for new in left_new:
        match = next((o for o in left_old if o.key == new.key), None)
        if match is not None:
            left_old.remove(match)
        out.append(Touched(old=match, new=new))
    out += [Touched(old=o, new=None) for o in left_old]
    return out


def _drop(symbols: list[Symbol], same: Counter[tuple[str, str]]) -> list[Symbol]:
    kept = []
    for s in symbols:
        if same[(s.key, s.dump)] > 0:
            same[(s.key, s.dump)] -= 1
        else:
            kept.append(s)
    return kept


# ---------------------------------------------------------------- symbols of a module


def _symbols(tree: ast.Module) -> list[Symbol]:
    module_binds = {n for node in tree.body for n in _bound_at_top(node)}
    out: list[Symbol] = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out += _imports(node)
        elif isinstance(node, ast.ClassDef):
            out += _class(node, module_binds)
        elif isinstance(node, _FUNCTIONS):
            out.append(_function(node, module_binds, key=f"def {node.name}", label=f"{node.name}()",
                                 binds=frozenset({node.name})))
        else:
            out.append(_statement(node, module_binds))
    return out


def _imports(node: ast.Import | ast.ImportFrom) -> list[Symbol]:
    out = []
    for alias in node.names:
        if isinstance(node, ast.Import):
            bound = alias.asname or alias.name.split(".")[0]
            label = f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
        else:
            bound = alias.asname or alias.name
            source = "." * node.level + (node.module or "")
            label = f"from {source} import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
        binds = frozenset() if bound == "*" else frozenset({bound})
        out.append(Symbol(key=f"import {bound}" if bound != "*" else label, label=label, dump=label, binds=binds,
                          uses=Counter(), line=node.lineno, is_import=True))
    return out


def _class(node: ast.ClassDef, module_binds: set[str]) -> list[Symbol]:
    name = node.name
    header = [n for n in node.body if not isinstance(n, (*_FUNCTIONS, ast.Assign, ast.AnnAssign))]
    pieces = [*node.bases, *node.keywords, *node.decorator_list, *header]
    out = [Symbol(key=f"class {name}", label=f"class {name}", dump=name + "|" + "|".join(ast.dump(p) for p in pieces),
                  binds=frozenset({name}), uses=_uses(pieces, module_binds, set()), line=node.lineno)]
    for member in node.body:
        if isinstance(member, _FUNCTIONS):
            out.append(_function(member, module_binds, key=f"{name}.{member.name}", label=f"{name}.{member.name}()",
                                 binds=frozenset({f"{name}.{member.name}"}), owner=name, parent=f"class {name}"))
        elif isinstance(member, ast.Assign | ast.AnnAssign):
            targets = sorted(_stored(member))
            out.append(Symbol(key=f"{name}.{','.join(targets)}", label=f"{name}.{', '.join(targets)}",
                              dump=ast.dump(member), binds=frozenset(f"{name}.{t}" for t in targets),
                              uses=_uses([member.value] if member.value else [], module_binds, set()),
                              line=member.lineno, parent=f"class {name}"))
    return out


def _function(node: ast.FunctionDef | ast.AsyncFunctionDef, module_binds: set[str], *, key: str, label: str,
              binds: frozenset[str], owner: str | None = None, parent: str | None = None) -> Symbol:
    args = node.args
    params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    params += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    local = set(params) | _assigned_inside(node)
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    self_name = params[0] if owner and params and not static else None
    body = [*node.body, *node.decorator_list, *args.defaults, *(d for d in args.kw_defaults if d is not None)]
    return Symbol(key=key, label=label, dump=ast.dump(node), binds=binds, line=node.lineno, parent=parent,
                  uses=_uses(body, module_binds, local, self_name=self_name, owner=owner))


def _statement(node: ast.stmt, module_binds: set[str]) -> Symbol:
    binds = frozenset(_bound_at_top(node))
    if _is_main_block(node):
        key = label = "the `if __name__ == '__main__'` block"
    elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and binds:
        key, label = f"assign {','.join(sorted(binds))}", ", ".join(sorted(binds))
    else:
        kind = type(node).__name__.lower()
        key, label = f"stmt {kind}", f"the module-level `{kind}` statement at line {node.lineno}"
    return Symbol(key=key, label=label, dump=ast.dump(node), binds=binds, line=node.lineno,
                  uses=_uses([node], module_binds, set(binds)))


def _is_main_block(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    names = [n for n in (node.test.left, *node.test.comparators) if isinstance(n, ast.Name)]
    return any(n.id == "__name__" for n in names)


def _bound_at_top(node: ast.stmt) -> set[str]:
    if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {a.asname or a.name.split(".")[0] for a in node.names if a.name != "*"}
    return _stored(node)


def _stored(node: ast.AST) -> set[str]:
    found = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del)}
    found |= {n.name for n in ast.walk(node) if isinstance(n, (*_FUNCTIONS, ast.ClassDef)) and n is not node}
    return found


def _assigned_inside(node: ast.AST) -> set[str]:
    """Names a function binds for itself (assignments, nested defs, imports, comprehension targets, handlers),
    less the ones it declares global."""
    found = _stored(node)
    for n in ast.walk(node):
        if isinstance(n, ast.arg):
            found.add(n.arg)
        elif isinstance(n, ast.Import | ast.ImportFrom) and n is not node:
            found |= {a.asname or a.name.split(".")[0] for a in n.names if a.name != "*"}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            found.add(n.name)
    declared = {name for n in ast.walk(node) if isinstance(n, ast.Global | ast.Nonlocal) for name in n.names}
    return found - declared


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner is not None else None
    return None


def _uses(nodes: list[ast.AST], module_binds: set[str], local: set[str], *, self_name: str | None = None,
          owner: str | None = None) -> Counter[str]:
    """Every maximal dotted name the code reads that is not its own local (self.x in a method: Owner.x)."""
    found: Counter[str] = Counter()

    def visit(node: ast.AST) -> None:
        chain = _dotted(node)
        if chain is not None and not (isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)):
            root, _, rest = chain.partition(".")
            if self_name is not None and root == self_name:
                if rest:
                    found[f"{owner}.{rest.split('.')[0]}"] += 1
            elif root not in local and (root in module_binds or root not in _BUILTINS):
                found[chain] += 1
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    for n in nodes:
        visit(n)
    return found

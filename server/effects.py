"""What a tool's engine can reach, read from the code: the check behind the catalog's declared effects.

server/catalog.py declares each tool's `Effects` (does it start a program, reach the network, write the
user's knowledge files) and derives the MCP annotations from them; tests/test_tool_list.py compares every
declaration with what this analysis finds, so an engine that gains a path to the process runner cannot keep
`readOnlyHint: true`.

The analysis is a call graph of rootcause's own code by name, built from the source with `ast` (nothing is
imported): a function reaches what its body names (functions, classes, module variables, through imports,
lazy ones included); naming a class reaches its implicit methods (dunders, decorated validators, properties)
and makes it live; a method called on an object whose type is not known (`store.record(...)`) reaches that
method of every live class (rapid type analysis), `self.m` and `super().m` the class's own. A reference
counts whether or not it is called (a callback handed to a thread is reached), and importing a module runs
its top level. It over-approximates, never misses a direct path: a false "can start a program" costs a
confirmation prompt, a missed one an auto-approved command.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "rootcause"
SOURCES = ("tools",)  # engines and everything they import; server/ is wiring and never an engine's callee
# Calls that start a program, by the external name they resolve to.
SPAWNS = frozenset({
    "subprocess.Popen", "subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output",
    "subprocess.getoutput", "subprocess.getstatusoutput", "asyncio.create_subprocess_exec",
    "asyncio.create_subprocess_shell", "os.system", "os.popen", "os.posix_spawn", "os.posix_spawnp", "os.fork",
    "os.forkpty", "os.execv", "os.execve", "os.execvp", "os.execvpe", "os.execl", "os.execle", "os.execlp",
    "os.execlpe", "os.spawnv", "os.spawnve", "os.spawnvp", "os.spawnvpe", "os.spawnl", "os.spawnle",
    "multiprocessing.Process", "pty.spawn",
})
NETWORK = frozenset({
    "urllib.request.urlopen", "urllib.request.build_opener", "http.client.HTTPConnection",
    "http.client.HTTPSConnection", "socket.socket", "socket.create_connection", "httpx.Client",
    "httpx.AsyncClient", "httpx.get", "httpx.post", "requests.get", "requests.post", "requests.Session",
})
# git is the one program started outside the process runner: a fixed program on argv rootcause builds, reading
# the repository (log, status, diff) and managing worktrees under .rootcause/. Reaching it starts nothing the
# caller chose; every other spawn is the runner's (tests/test_tool_list.py checks that no other module spawns).
GIT = f"{PACKAGE}.tools.core.gitrepo"
KNOWLEDGE_WRITE = f"{PACKAGE}.tools.knowledge.appender:atomic_write"


@dataclass
class _Module:
    name: str
    tree: ast.Module
    is_package: bool
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> "module" or "module:attribute"
    defs: dict[str, str] = field(default_factory=dict)  # top-level name -> node key
    bodies: dict[str, list[ast.AST]] = field(default_factory=dict)  # node key -> the code it runs
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)


@dataclass
class Reach:
    """Where an engine can get to: each target found, with the chain of node keys that leads there."""

    spawns: list[str] | None = None  # a call that starts a program (not git's)
    network: list[str] | None = None
    knowledge_write: list[str] | None = None


class CallGraph:
    def __init__(self, root: Path) -> None:
        self.modules: dict[str, _Module] = {}
        for folder in SOURCES:
            for path in sorted((root / folder).rglob("*.py")):
                if "__pycache__" in path.parts or "/demo/" in path.as_posix():
                    continue  # the demo drives `rootcause serve` as a client: no engine calls it
                parts = list(path.relative_to(root).with_suffix("").parts)
                package = parts[-1] == "__init__"
                name = ".".join([PACKAGE, *(parts[:-1] if package else parts)])
                self.modules[name] = self._read(name, path, package)
        self.methods: dict[str, dict[str, str]] = {}  # class key -> method name -> key
        self.bases: dict[str, list[str]] = {}
        for module in self.modules.values():
            for key, node in module.classes.items():
                self.methods[key] = {item.name: f"{key}.{item.name}" for item in node.body
                                     if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)}
        for module in self.modules.values():
            for key, node in module.classes.items():
                self.bases[key] = [b for b in (self._resolve_expr(module, base) for base in node.bases)
                                   if b in self.methods]
        self._refs: dict[str, tuple[set[str], set[str]]] = {}

    # -- reading -------------------------------------------------------------------------------------------

    def _read(self, name: str, path: Path, package: bool) -> _Module:
        module = _Module(name, ast.parse(path.read_text(encoding="utf-8"), str(path)), package)
        for node in ast.walk(module.tree):  # imports anywhere (lazy ones inside functions too) name the module's
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        module.aliases[alias.asname] = alias.name
                    else:
                        module.aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = self._absolute(module, node)
                for alias in node.names:
                    module.aliases[alias.asname or alias.name] = f"{base}:{alias.name}"
        top: list[ast.AST] = []
        for node in module.tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                key = f"{name}:{node.name}"
                module.defs[node.name] = key
                module.bodies[key] = [node]
            elif isinstance(node, ast.ClassDef):
                key = f"{name}:{node.name}"
                module.defs[node.name] = key
                module.classes[key] = node
                body: list[ast.AST] = [*node.bases, *node.decorator_list, *(k.value for k in node.keywords)]
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        module.bodies[f"{key}.{item.name}"] = [item]
                    else:
                        body.append(item)
                module.bodies[key] = body
            else:
                top.append(node)
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, ast.AnnAssign) else []
                for target in targets:
                    if isinstance(target, ast.Name):
                        module.defs[target.id] = f"{name}:<module>"
        module.bodies[f"{name}:<module>"] = top
        return module

    @staticmethod
    def _absolute(module: _Module, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        return ".".join(package + ([node.module] if node.module else []))

    # -- resolving -----------------------------------------------------------------------------------------

    def _resolve(self, qualified: str) -> str:
        """"module" or "module:attribute" -> a node key of ours, or the external dotted name."""
        for _hop in range(20):  # re-exports chain through package __init__ files
            if ":" not in qualified:
                return f"{qualified}:<module>" if qualified in self.modules else qualified
            name, _, attribute = qualified.partition(":")
            module = self.modules.get(name)
            if module is None:
                return f"{name}.{attribute}:<module>" if f"{name}.{attribute}" in self.modules else \
                    f"{name}.{attribute}"
            # a package's own names shadow its submodules (`from .execute import execute` in __init__)
            if attribute in module.defs:
                return module.defs[attribute]
            if attribute in module.aliases:
                qualified = module.aliases[attribute]
                continue
            if f"{name}.{attribute}" in self.modules:
                return f"{name}.{attribute}:<module>"
            return f"{name}:<module>"
        return qualified

    def _resolve_expr(self, module: _Module, node: ast.AST) -> str | None:
        chain = _dotted(node)
        if not chain:
            return None
        target, rest = self._resolve_chain(module, chain)
        return target if not rest else None

    def _resolve_chain(self, module: _Module, chain: list[str]) -> tuple[str | None, list[str]]:
        """The node (or external name) a dotted chain names, and the attributes left unresolved after it."""
        head, rest = chain[0], chain[1:]
        if head in module.defs:
            target = module.defs[head]
        elif head in module.aliases:
            target = self._resolve(module.aliases[head])
        else:
            return None, rest
        while rest:
            if target.endswith(":<module>"):
                target, rest = self._resolve(f"{target.removesuffix(':<module>')}:{rest[0]}"), rest[1:]
            elif target in self.methods:
                method = self._method(target, rest[0])
                if method is None:
                    break
                target, rest = method, rest[1:]
            elif target.partition(":")[0] in self.modules:
                break  # an attribute of a function or variable of ours: a call result, data
            else:
                target, rest = f"{target}.{rest[0]}", rest[1:]  # external: os.path.join, subprocess.Popen
        return target, rest

    def _method(self, cls: str, name: str) -> str | None:
        seen: set[str] = set()
        queue = [cls]
        while queue:
            current = queue.pop(0)
            if current in seen:
                continue
            seen.add(current)
            if name in self.methods.get(current, {}):
                return self.methods[current][name]
            queue += self.bases.get(current, [])
        return None

    def refs(self, key: str) -> tuple[set[str], set[str]]:
        """What a node's code names: (node keys and external names, attribute names on objects of unknown type)."""
        if key in self._refs:
            return self._refs[key]
        name, _, local = key.partition(":")
        module = self.modules[name]
        own_class = key.rsplit(".", 1)[0] if "." in local else None
        targets: set[str] = set()
        dispatch: set[str] = set()
        if key in self.methods:
            for method, method_key in self.methods[key].items():
                node = module.bodies[method_key][0]
                if method.startswith("__") or getattr(node, "decorator_list", None):
                    targets.add(method_key)  # run without being named: construction, validation, properties
            targets.update(self.bases.get(key, []))
        for top in module.bodies.get(key, []):
            for node in ast.walk(top):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    target, _ = self._resolve_chain(module, [node.id])
                    if target is not None:
                        targets.add(target)
                elif isinstance(node, ast.Attribute):
                    chain = _dotted(node)
                    if chain and own_class and chain[0] in ("self", "cls") and len(chain) == 2:
                        method = self._method(own_class, chain[1])
                        if method is not None:
                            targets.add(method)
                            continue
                    if _is_super(node.value) and own_class:
                        for base in self.bases.get(own_class, []):
                            method = self._method(base, node.attr)
                            if method is not None:
                                targets.add(method)
                        continue
                    if chain:
                        target, rest = self._resolve_chain(module, chain)
                        if target is not None:
                            targets.add(target)
                            dispatch.update(rest[:1])
                            continue
                    dispatch.add(node.attr)
        self._refs[key] = (targets, dispatch)
        return targets, dispatch

    # -- reaching ------------------------------------------------------------------------------------------

    def reach(self, start: str) -> Reach:
        """Everything reachable from `start` (a node key), breadth first, with the first chain to each target."""
        previous: dict[str, str | None] = {start: None}
        queue = deque([start])
        live: set[str] = set()
        wanted: set[str] = set()  # attribute names called on objects of unknown type, so far
        found = Reach()

        def visit(key: str, via: str) -> None:
            if key not in previous:
                previous[key] = via
                queue.append(key)

        def chain(key: str) -> list[str]:
            out: list[str] = []
            node: str | None = key
            while node is not None:
                out.append(node)
                node = previous[node]
            return out[::-1]

        while queue:
            key = queue.popleft()
            name = key.partition(":")[0]
            if name not in self.modules:  # an external name: a leaf
                if key in SPAWNS and found.spawns is None and not previous[key].startswith(f"{GIT}:"):
                    found.spawns = chain(key)
                if key in NETWORK and found.network is None:
                    found.network = chain(key)
                continue
            if key == KNOWLEDGE_WRITE and found.knowledge_write is None:
                found.knowledge_write = chain(key)
            visit(f"{name}:<module>", key)  # a module's code runs when anything of it is used
            targets, dispatch = self.refs(key)
            for target in targets:
                visit(target, key)
                if target in self.methods and target not in live:
                    live.add(target)
                    for method, method_key in self.methods[target].items():
                        if method in wanted:
                            visit(method_key, target)
            for attribute in dispatch - wanted:
                wanted.add(attribute)
                for cls in live:
                    if attribute in self.methods[cls]:
                        visit(self.methods[cls][attribute], key)
        return found

    def spawn_sites(self) -> dict[str, str]:
        """Every node of ours whose own code starts a program: node key -> the call."""
        sites = {}
        for module in self.modules.values():
            for key in module.bodies:
                targets, _ = self.refs(key)
                spawned = sorted(targets & SPAWNS)
                if spawned:
                    sites[key] = spawned[0]
        return sites


def _dotted(node: ast.AST) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _is_super(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def engine_reach(root: Path, tool: str, graph: CallGraph | None = None) -> Reach:
    """What tool `tool`'s engine function can reach (its input model comes along: the signature names it)."""
    graph = graph or CallGraph(root)
    module = f"{PACKAGE}.tools.engines.{tool}"
    return graph.reach(f"{module}:{tool}")

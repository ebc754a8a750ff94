"""Which environment variables a body of Python code reads, found in its syntax trees (tests/test_config_reference.py
holds the list in reposwarm/envvars.py against it).

A read is `os.environ.get(X)`, `os.environ[X]`, `os.environ.pop(X)`, `X in os.environ`, `os.getenv(X)`, the same on
a copy of os.environ (`env = dict(os.environ)`), and a call of a function that does one of those with its parameter
(`env_number("REPOSWARM_MODEL_TIMEOUT_S", 300)`). X is told when it is a string, a module's constant (`SWITCH =
"REPOSWARM_SANDBOX"`, imported, or another module's: `sandbox.SWITCH`), or a name bound by a loop or an assignment
over such constants (`for key in ("BASE_BRANCH", "SWARM_BRANCH")`, `for name, _ in TOOLCHAIN_ENV.items()`,
`key, base = KEYS[provider]`, `KEYS[p][0]`). What cannot be told is said, with the expression it comes from, so
the code can be made plain.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Unknown:
    """A value the scan cannot tell: the expression it comes from."""

    text: str


@dataclass(frozen=True)
class Mapping:
    pairs: tuple[tuple[object, object], ...]


@dataclass(frozen=True)
class Items:
    """A collection whose items are known but not their order or number (a tuple with a starred part)."""

    items: frozenset[object]


def _unknown(expr: ast.AST | str) -> set[object]:
    return {Unknown(expr if isinstance(expr, str) else ast.unparse(expr))}


@dataclass
class Found:
    names: dict[str, list[str]] = field(default_factory=dict)  # variable -> where it is read (file:line)
    unknown: list[tuple[str, str, str]] = field(default_factory=list)  # (where, the read, what cannot be told)


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
            and node.value.id == "os")


def _is_environ_copy(node: ast.AST) -> bool:
    """os.environ, or a copy of it (dict(os.environ), {**os.environ, ...}, os.environ.copy()), maybe in an if."""
    if _is_environ(node):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and node.args:
        return _is_environ_copy(node.args[0])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "copy":
        return _is_environ(node.func.value)
    if isinstance(node, ast.Dict):
        return any(k is None and _is_environ(v) for k, v in zip(node.keys, node.values, strict=True))
    if isinstance(node, ast.IfExp):
        return _is_environ_copy(node.body) or _is_environ_copy(node.orelse)
    if isinstance(node, ast.BoolOp):
        return any(_is_environ_copy(v) for v in node.values)
    return False


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's (or the module's) own body: not of the functions and classes inside it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))


@dataclass
class Binding:
    how: str  # "assign", "iterate" (a loop's target), "param", "import"
    value: ast.AST | None = None  # what is bound (assign, iterate)
    path: tuple[int, ...] = ()  # where in it: (0,) is the first of a tuple
    scope: ast.AST | None = None  # the function (param)
    index: int = 0  # a parameter's position
    source: tuple[str, str] = ("", "")  # (module, name) an import binds


def _targets(target: ast.AST, path: tuple[int, ...] = ()) -> Iterator[tuple[str, tuple[int, ...]]]:
    if isinstance(target, ast.Name):
        yield target.id, path
    elif isinstance(target, ast.Tuple | ast.List):
        for i, elt in enumerate(target.elts):
            yield from _targets(elt, (*path, i))


def _index(value: object, i: int) -> object:
    if isinstance(value, tuple) and -len(value) <= i < len(value):
        return value[i]
    if isinstance(value, Items) and len(value.items) == 1:
        return next(iter(value.items))
    return value if isinstance(value, Unknown) else Unknown(f"[{i}] of {value!r}")


class Module:
    def __init__(self, path: Path, root: Path, project: Project) -> None:
        self.where = str(path.relative_to(root))
        self.dotted = self.where.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        self.tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        self.project = project
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.bindings: dict[ast.AST, dict[str, list[Binding]]] = {
            scope: self._bind(scope) for scope in [self.tree, *(
                n for n in ast.walk(self.tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))]}

    def _bind(self, scope: ast.AST) -> dict[str, list[Binding]]:
        out: dict[str, list[Binding]] = {}
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            for i, arg in enumerate([*scope.args.posonlyargs, *scope.args.args]):
                out.setdefault(arg.arg, []).append(Binding("param", scope=scope, index=i))
        for node in _own_nodes(scope):
            pairs: list[tuple[ast.AST, ast.AST, str]] = []
            if isinstance(node, ast.Assign):
                pairs += [(t, node.value, "assign") for t in node.targets]
            elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
                pairs.append((node.target, node.value, "assign"))
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                pairs.append((node.target, node.iter, "iterate"))
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    out.setdefault(alias.asname or alias.name, []).append(
                        Binding("import", source=(node.module, alias.name)))
            for target, value, how in pairs:
                for name, path in _targets(target):
                    out.setdefault(name, []).append(Binding(how, value=value, path=path))
        return out

    def lookup(self, name: str, at: ast.AST) -> list[Binding] | None:
        """The bindings of `name` where `at` uses it: its function's, an enclosing one's, or the module's."""
        node = at
        while node in self.parents:
            node = self.parents[node]
            if node in self.bindings and name in self.bindings[node]:
                return self.bindings[node][name]
        return None

    # --- what an expression can be: strings, tuples, Mapping, Items, Unknown ---

    def values(self, expr: ast.AST, seen: frozenset[int] = frozenset()) -> set[object]:
        if id(expr) in seen:
            return _unknown(expr)
        seen = seen | {id(expr)}
        if isinstance(expr, ast.Constant):
            return {expr.value}
        if isinstance(expr, ast.Tuple | ast.List):
            parts = [self.values(e, seen) if not isinstance(e, ast.Starred) else _unknown(e) for e in expr.elts]
            if any(isinstance(v, Unknown) for p in parts for v in p) or len(list(itertools.product(*parts))) > 64:
                return {Items(frozenset(self.iterate(expr, seen)))}
            return {tuple(combo) for combo in itertools.product(*parts)}
        if isinstance(expr, ast.Dict):
            pairs: list[tuple[object, object]] = []
            for k, v in zip(expr.keys, expr.values, strict=True):
                if k is None:  # {**other}: its pairs
                    pairs += [p for m in self.values(v, seen) if isinstance(m, Mapping) for p in m.pairs]
                    continue
                pairs += [(kk, vv) for kk in self.values(k, seen) for vv in self.values(v, seen)]
            return {Mapping(tuple(pairs))}
        if isinstance(expr, ast.Name):
            return self.name_values(expr, seen)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            bindings = self.lookup(expr.value.id, expr) or []
            modules = {f"{b.source[0]}.{b.source[1]}" for b in bindings if b.how == "import"}
            modules |= {expr.value.id} if not bindings else set()
            found: set[object] = set()
            for module in modules:
                found |= self.project.module_constant(module, expr.attr, seen)
            return found or _unknown(expr)
        if isinstance(expr, ast.IfExp):
            return self.values(expr.body, seen) | self.values(expr.orelse, seen)
        if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.Or):
            return set().union(*(self.values(v, seen) for v in expr.values))
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get" \
                and expr.args:
            got = self._mapping_values(expr.func.value, seen)
            return got | (self.values(expr.args[1], seen) if len(expr.args) > 1 else {None})
        if isinstance(expr, ast.Subscript):
            if isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, int):
                return {v if isinstance(v, Unknown) else _index(v, expr.slice.value)
                        for v in self.values(expr.value, seen)}
            return self._mapping_values(expr.value, seen)
        return _unknown(expr)

    def _mapping_values(self, expr: ast.AST, seen: frozenset[int]) -> set[object]:
        out: set[object] = set()
        for value in self.values(expr, seen):
            out |= {v for _, v in value.pairs} if isinstance(value, Mapping) else {value} \
                if isinstance(value, Unknown) else _unknown(expr)
        return out

    def iterate(self, expr: ast.AST, seen: frozenset[int] = frozenset()) -> set[object]:
        """The items iterating `expr` gives."""
        if isinstance(expr, ast.Tuple | ast.List | ast.Set):
            out: set[object] = set()
            for e in expr.elts:
                out |= self.iterate(e.value, seen) if isinstance(e, ast.Starred) else self.values(e, seen)
            return out
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) \
                and expr.func.id in ("frozenset", "set", "tuple", "list", "sorted") and len(expr.args) == 1:
            return self.iterate(expr.args[0], seen)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.args \
                and expr.func.attr in ("items", "keys", "values"):
            out = set()
            for value in self.values(expr.func.value, seen):
                if isinstance(value, Mapping):
                    out |= ({(k, v) for k, v in value.pairs} if expr.func.attr == "items" else
                            {k for k, _ in value.pairs} if expr.func.attr == "keys" else {v for _, v in value.pairs})
                else:
                    out |= {value} if isinstance(value, Unknown) else _unknown(expr)
            return out
        out = set()
        for value in self.values(expr, seen):
            if isinstance(value, Mapping):
                out |= {k for k, _ in value.pairs}
            elif isinstance(value, Items):
                out |= value.items
            elif isinstance(value, tuple):
                out |= set(value)
            else:
                out |= {value} if isinstance(value, Unknown) else _unknown(expr)
        return out

    def name_values(self, name: ast.Name, seen: frozenset[int]) -> set[object]:
        bindings = self.lookup(name.id, name)
        if bindings is None:
            return _unknown(name)
        out: set[object] = set()
        for b in bindings:
            if b.how == "param":
                assert isinstance(b.scope, ast.FunctionDef | ast.AsyncFunctionDef)
                out |= self.project.arguments(b.scope, b.index, seen)
            elif b.how == "import":
                out |= self.project.module_constant(*b.source, seen)
            else:
                assert b.value is not None
                for item in self.iterate(b.value, seen) if b.how == "iterate" else self.values(b.value, seen):
                    for i in b.path:
                        item = _index(item, i)
                    out.add(item)
        return out

    # --- reads ---

    def environ_copy(self, expr: ast.AST) -> bool:
        """os.environ, or a name bound to a copy of it."""
        if _is_environ(expr):
            return True
        if isinstance(expr, ast.Name):
            return any(b.how == "assign" and b.value is not None and _is_environ_copy(b.value)
                       for b in self.lookup(expr.id, expr) or [])
        return False

    def read_at(self, node: ast.AST) -> ast.AST | None:
        """The expression naming the variable `node` reads, if it reads one."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in ("get", "pop", "setdefault") and self.environ_copy(node.func.value):
                return node.args[0]
            if node.func.attr == "getenv" and isinstance(node.func.value, ast.Name) and node.func.value.id == "os":
                return node.args[0]
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and self.environ_copy(node.value):
            return node.slice
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In | ast.NotIn) \
                and self.environ_copy(node.comparators[0]):
            return node.left
        return None


class Project:
    def __init__(self, files: Iterable[Path], root: Path) -> None:
        self.modules = [Module(path, root, self) for path in files]
        self.by_dotted = {m.dotted: m for m in self.modules}

    def module_constant(self, module: str, name: str, seen: frozenset[int]) -> set[object]:
        """A module-level name of one of the project's modules (what it assigns, or imports from another)."""
        m = self.by_dotted.get(module)
        if m is None:
            return _unknown(f"{module}.{name}")
        out: set[object] = set()
        for b in m.bindings[m.tree].get(name, []):
            if b.how == "import":
                out |= self.module_constant(*b.source, seen)
            elif b.how == "assign" and not b.path and b.value is not None:
                out |= m.values(b.value, seen)
        return out or _unknown(f"{module}.{name}")

    def arguments(self, function: ast.FunctionDef | ast.AsyncFunctionDef, index: int,
                  seen: frozenset[int]) -> set[object]:
        """What the calls of `function` (by its name, anywhere) pass as its parameter `index`."""
        params = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        out: set[object] = set()
        for m in self.modules:
            for node in ast.walk(m.tree):
                if not isinstance(node, ast.Call):
                    continue
                called = node.func.id if isinstance(node.func, ast.Name) else \
                    node.func.attr if isinstance(node.func, ast.Attribute) else None
                if called != function.name:
                    continue
                offset = 1 if params[:1] in (["self"], ["cls"]) and isinstance(node.func, ast.Attribute) else 0
                if 0 <= index - offset < len(node.args):
                    out |= m.values(node.args[index - offset], seen)
                for keyword in node.keywords:
                    if keyword.arg == params[index]:
                        out |= m.values(keyword.value, seen)
        return out

    def reads(self) -> Found:
        found = Found()
        for m in self.modules:
            for node in ast.walk(m.tree):
                expr = m.read_at(node)
                if expr is None:
                    continue
                where = f"{m.where}:{getattr(node, 'lineno', 0)}"
                for value in m.values(expr):
                    if isinstance(value, str):
                        found.names.setdefault(value, []).append(where)
                    elif value is not None:
                        what = value.text if isinstance(value, Unknown) else repr(value)
                        found.unknown.append((where, ast.unparse(node), what))
        return found

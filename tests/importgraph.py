"""The import graph of the product, read from the code with `ast` (no import runs): rooms, circles, upward imports.

A room is a folder of `reposwarm/` (a loose module of `reposwarm/` is a room of its own), `workflows/` or
`activities/`; the entry points (`worker.py`, `starter.py`) are rooms too. FLOORS orders them, low to high. An
import from a lower floor to a higher one "climbs back up"; a circle of rooms is a knot.
`python -m tests.importgraph` prints the rooms' graph, its circles, the upward imports and the circles of files.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reposwarm", "workflows", "activities")
ENTRY_POINTS = ("worker", "starter")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported module, dotted (a name imported from a package resolves to its module if one exists)
    line: int
    comment: str  # the text after '#' on the import's first line, if any


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.is_relative_to(ROOT / "reposwarm" / "demo"):
                continue  # the demo's data (its example repository), not the product
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    for name in ENTRY_POINTS:
        if (ROOT / f"{name}.py").is_file():
            found[name] = ROOT / f"{name}.py"
    return found


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(known: dict[str, Path] | None = None) -> Iterator[Import]:
    known = known if known is not None else modules()
    for source, path in known.items():
        text = path.read_text()
        lines = text.splitlines()
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node in ast.walk(ast.parse(text)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [f"{base}.{alias.name}" for alias in node.names] or [base]
            line = lines[node.lineno - 1] if names else ""
            comment = line.partition("#")[2].strip()
            for name in names:
                target = _resolve(name, known)
                if target and target != source:
                    yield Import(source, target, node.lineno, comment)


def room(module: str) -> str:
    parts = module.split(".")
    if parts[0] in ENTRY_POINTS:
        return parts[0]
    if parts[0] != "reposwarm":
        return parts[0]
    return ".".join(parts[:2]) if len(parts) > 1 else "reposwarm"


FLOORS = [  # low to high: a room imports only rooms on its floor or below
    ["reposwarm.contracts", "reposwarm.text", "reposwarm.gitvalues", "reposwarm.envvars"],  # values
    ["reposwarm.runs", "reposwarm.telemetry"],  # a run's files, ledger and traces
    ["reposwarm.vcs", "reposwarm.client", "reposwarm.devserver"],  # git; Temporal: the connection, a local server
    ["reposwarm.slices", "reposwarm.symbols"],  # the path policy; the symbol index
    ["reposwarm.checks"],  # running a check profile and judging it; which tests it runs
    ["reposwarm.intel"],  # what the repository's files say: packages, layout, the detected profile
    ["reposwarm.models"],  # the providers
    ["reposwarm.proxy"],  # the model proxy between outside agents and the providers
    ["reposwarm.agent", "reposwarm.agents", "reposwarm.lanes"],  # a lane's tools and loop; the agent CLIs; the lanes file
    ["reposwarm.review"],  # what a reviewer reads
    ["reposwarm"],  # the package itself
    ["activities"],
    ["workflows"],
    ["reposwarm.cli", "reposwarm.docs_reference"],  # the commands, the worker's body, the MCP server; `make docs`
    ["worker", "starter"],  # entry points
]


def floor(room_name: str) -> int:
    for level, rooms in enumerate(FLOORS):
        if room_name in rooms:
            return level
    raise KeyError(f"{room_name} is on no floor: add it to tests/importgraph.py FLOORS")


def room_graph(found: list[Import]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in found:
        a, b = room(imp.source), room(imp.target)
        if a != b:
            graph[a].add(b)
    return graph


def file_graph(found: list[Import]) -> dict[str, set[str]]:
    """Modules of one room importing each other (a package's __init__ re-exporting its own modules is left out)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in found:
        if room(imp.source) == room(imp.target) and imp.source != room(imp.source):
            graph[imp.source].add(imp.target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def upward(found: list[Import]) -> list[Import]:
    return [imp for imp in found if floor(room(imp.source)) < floor(room(imp.target))]


def test_modules() -> list[str]:
    """Product modules whose names read as tests."""
    return sorted(m for m, p in modules().items() if p.name.startswith("test_"))


def main() -> int:
    found = list(imports())
    graph = room_graph(found)
    print("rooms:")
    for a in sorted(graph):
        print(f"  {a} (floor {floor(a)}) -> {', '.join(sorted(graph[a]))}")
    print("circles of rooms:", circles(graph) or "none")
    print("imports that climb back up:")
    for imp in upward(found):
        print(f"  {imp.source}:{imp.line} -> {imp.target}  # {imp.comment}")
    print("circles of files within a room:", circles(file_graph(found)) or "none")
    print("product modules named test_*:", test_modules() or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())

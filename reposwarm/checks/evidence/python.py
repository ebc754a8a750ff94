"""Python: which modules a check's interpreters loaded, and from where, read from the interpreters themselves.

`start` writes the tracer (tracer_site.py) as `sitecustomize.py` into a folder of the command's reports folder (the
one folder outside the tree the sandbox lets it write) and puts that folder first on the command's PYTHONPATH,
before whatever PYTHONPATH the tree's environment or the profile gives. Every interpreter of the check that reads
PYTHONPATH then writes one record at its exit (`read`): module name -> file.

`sort` holds the records against the tree: a module file that is one of the tree's own files was loaded from the
tree (`inside`); a module whose name is a tree module's but whose file is elsewhere (site-packages, the user's
checkout through an editable install, a virtual environment or a build folder inside the tree) was loaded from
outside, and the tree file it stands for is named with where it came from. A tree file's module names come from
the folders it can be imported from (`import_roots`): the tree's top, each Python project's folder (a
pyproject.toml, setup.py or setup.cfg) and its `src/`, `lib/` and `python/`, and every folder of the tree a
process had on sys.path; `src/attr/_make.py` is `attr._make`, `pkg/__init__.py` is `pkg`, a namespace package's
module is named through its folders alike.

Not seen: an interpreter started with -I, -E or an environment without PYTHONPATH (tox and nox by default), one
killed by a signal, one that replaced itself with os.exec*. A pytest or unittest command none of whose processes
ran the runner gave no evidence of its tests (`complete`): its files stay unknown, never "not loaded".
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reposwarm.checks.evidence.files import Budget, TreeFiles

SITE = Path(__file__).with_name("tracer_site.py")
SITE_FOLDER = "evidence-site"
RECORDS = "evidence-python"
PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
PROJECT_ROOTS = ("", "src", "lib", "python")
MAX_MODULES = 50_000  # per process, kept in the store
# the module a runner's own process loads: a command of that runner none of whose processes loaded it gave no
# record of its tests
RUNNER_MODULES = {"pytest": ("_pytest", "pytest"), "unittest": ("unittest",)}


def start(reports: Path, pythonpath: str | None, lines: Mapping[str, Iterable[int]]) -> tuple[Path, dict[str, str]]:
    """The records folder, and the command's environment additions. `lines`: absolute path of a changed file ->
    its changed lines (Python 3.12+ reports which of them ran)."""
    site, out = reports / SITE_FOLDER, reports / RECORDS
    site.mkdir()
    out.mkdir()
    config = {"out": str(out), "lines": {path: sorted(set(ls)) for path, ls in lines.items()}}
    text = "# -*- coding: utf-8 -*-\n_REPOSWARM_EVIDENCE = " + repr(config) + "\n" + SITE.read_text(encoding="utf-8")
    (site / "sitecustomize.py").write_text(text, encoding="utf-8")
    return out, {"PYTHONPATH": str(site) + (os.pathsep + pythonpath if pythonpath else "")}


@dataclass
class Process:
    """One interpreter's record, as read (every field checked: the record was written by the check)."""

    pid: int
    argv: list[str]
    executable: str
    version: str
    how: str  # "exit" (atexit) or "_exit" (os._exit)
    path: list[str]
    modules: dict[str, str]
    lines: dict[str, list[int]]
    monitored: bool  # Python 3.12+ with changed lines asked: `lines` is measured

    def summary(self) -> dict[str, Any]:
        return {"pid": self.pid, "argv": self.argv, "executable": self.executable, "version": self.version,
                "how": self.how, "path": self.path, "modules": self.modules}


def _strs(value: Any, limit: int) -> list[str]:
    return [v[:4096] for v in value[:limit] if isinstance(v, str)] if isinstance(value, list) else []


def read(folder: Path, budget: Budget) -> list[Process]:
    import json

    processes = []
    for _, data in budget.evidence(folder, ".json"):
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError):  # (a record nested to break the parser)
            continue
        if not isinstance(raw, dict) or not isinstance(raw.get("modules"), dict):
            continue
        modules = {k[:512]: v[:4096] for k, v in list(raw["modules"].items())[:MAX_MODULES]
                   if isinstance(k, str) and isinstance(v, str)}
        lines = {f: [n for n in ns if isinstance(n, int)] for f, ns in (raw.get("lines") or {}).items()
                 if isinstance(f, str) and isinstance(ns, list)} if isinstance(raw.get("lines"), dict) else {}
        pid = raw.get("pid")
        processes.append(Process(pid=pid if isinstance(pid, int) else 0, argv=_strs(raw.get("argv"), 12),
                                 executable=str(raw.get("executable", ""))[:4096],
                                 version=str(raw.get("version", ""))[:32], how=str(raw.get("how", ""))[:16],
                                 path=_strs(raw.get("path"), 64), modules=modules, lines=lines,
                                 monitored=raw.get("monitored") is True))
    return processes


def complete(processes: list[Process], runner: str) -> bool:
    """Whether the records speak for the command's tests: some process ran its runner (pytest, unittest), or, for a
    command of no known Python runner, some process gave a record at all."""
    wanted = RUNNER_MODULES.get(runner)
    if wanted is None:
        return bool(processes)
    return any(name in p.modules for p in processes for name in wanted)


def import_roots(files: TreeFiles, processes: list[Process]) -> set[str]:
    """The tree's folders its Python modules are named from ("" the top)."""
    roots = {""}
    for f in files.files:
        name = f.rsplit("/", 1)[-1]
        if name in PROJECT_FILES:
            folder = f.rsplit("/", 1)[0] if "/" in f else ""
            roots |= {"/".join(p for p in (folder, sub) if p) for sub in PROJECT_ROOTS}
    for p in processes:
        for entry in p.path:
            rel = files.relative(entry) if os.path.isabs(entry) else None
            if rel is not None:
                roots.add(rel)
    return roots


@dataclass
class ModuleIndex:
    """A tree module's name -> the tree's .py files that are that module under some import root."""

    names: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, files: TreeFiles, roots: set[str]) -> ModuleIndex:
        index = cls()
        for f in files.files:
            if not f.endswith(".py"):
                continue
            parts = f[:-3].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            # (a root is an ancestor folder of the file: its module name is the path below it)
            for depth in range(len(parts)):
                root = "/".join(parts[:depth])
                if root in roots:
                    tail = parts[depth:]
                    if tail and all(t.isidentifier() for t in tail):
                        index.names.setdefault(".".join(tail), []).append(f)
        return index


def where(path: str, files: TreeFiles) -> str:
    """Where a module came from, in words: its path, or, inside the tree's root but not its source, that too."""
    rel = files.relative(path)
    if rel is not None:
        return f"{rel} (in the tree's ignored files: a copy, not the tree's source)"
    return path


@dataclass
class Sorted:
    inside: set[str] = field(default_factory=set)
    outside: dict[str, str] = field(default_factory=dict)
    lines: dict[str, set[int]] = field(default_factory=dict)  # measured watched files -> lines that ran


def sort(processes: list[Process], files: TreeFiles, watched: set[str]) -> Sorted:
    out = Sorted()
    index: ModuleIndex | None = None
    for process in processes:
        mine: set[str] = set()
        for name, path in process.modules.items():
            rel = files.relative(path)
            if rel is not None and files.own(rel):
                mine.add(rel)
                continue
            if not path.endswith((".py", ".pyc")):
                continue  # an extension module or a data file: no tree source stands for it
            if index is None:
                index = ModuleIndex.of(files, import_roots(files, processes))
            init = os.path.basename(path).startswith("__init__.")
            for tree_file in index.names.get(name, []):
                if (tree_file.rsplit("/", 1)[-1] == "__init__.py") == init:  # (a package for a package)
                    out.outside.setdefault(tree_file, where(path, files))
        out.inside |= mine
        if process.monitored:  # (its changed lines were watched: each watched file it loaded is measured)
            ran: dict[str, set[int]] = {}
            for path, numbers in process.lines.items():
                rel = files.relative(path)
                if rel is not None:
                    ran.setdefault(rel, set()).update(numbers)
            for rel in watched & mine:
                out.lines.setdefault(rel, set()).update(ran.get(rel, set()))
    return out

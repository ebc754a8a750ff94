"""Affected-test selection (issue 37): the tests a change can reach through the import graph, per runner kind, or
why the graph cannot tell (then the whole command runs).

A changed file reaches the files that read it, directly or through others (reposwarm/checks/selection/resolve.py); the
tests among them are affected, named as the runners' selectors take them (reposwarm/checks/runners/selectors.py):
python and js tests by file path, go tests by package import path, cargo tests by crate name.

Sound first: before the graph, a change to a build file, a package manifest or lock file, test configuration or a
code generation input falls back (the graph cannot see what it changes). A changed file the graph does not parse
(a data file, a language it does not read) counts through the code that names it (its basename, as text, found by
`git grep` on the revision, or on a lane's worktree): those files count as changed. Named by nobody,
documentation is ignored and anything else falls back. A changed code file counts through the tests that name it
too (a test runs or opens what it names); named by test configuration (jest's setupFiles, say), any change falls
back. A name that is an import of another file of that name (`../lib.mjs` in every service) is the graph's to
follow, not a mention.

The graph is the revision's, with the change's added and deleted paths in it (an unchanged file's import of a
deleted file still reaches it), and with a worktree, what its versions of the changed files say of the packages
they are in (Java). A test the worktree deleted is not named.
"""

from __future__ import annotations

import contextlib
import fnmatch
import posixpath
import re
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from reposwarm.checks.selection import imports, resolve
from reposwarm.checks.testpaths import is_test_path
from reposwarm.symbols.index import SymbolIndexError
from reposwarm.vcs import gitcmd

KINDS = ("python", "js", "go", "cargo")
RUNNER_KIND = {"pytest": "python", "unittest": "python", "node": "js", "jest": "js", "vitest": "js", "go": "go",
               "cargo": "cargo"}
MAX_WHY = 200
MIN_NAME = 3  # a changed file's name is searched for in the code: a shorter one is in every file


@dataclass(frozen=True)
class Affected:
    changed: tuple[str, ...]  # the changed paths considered
    names: dict[str, list[str]] | None  # kind -> affected tests, sorted; None: some change the graph cannot see through
    fallback: str  # why names is None: names the file and why; "" otherwise
    tests: dict[str, int]  # kind -> how many tests of that kind the tree has (for "14 of 1,600")
    why: dict[str, str]  # affected test -> the changed file it reaches (bounded to MAX_WHY entries)
    ignored: tuple[str, ...] = field(default=())  # changed files no test and no code can read (docs), said so


# --- what the graph cannot see through ----------------------------------------------------------------------------

_BUILD = ("BUILD", "BUILD.bazel", "BUCK", "*.bzl", "WORKSPACE*", "MODULE.bazel", ".bazelrc", ".bazelversion",
          "Makefile", "makefile", "GNUmakefile", "*.mk", "CMakeLists.txt", "*.cmake", "pants.toml", "BUILD.pants",
          "nx.json", "project.json", "turbo.json", "lerna.json", "meson.build", "build.gradle*", "settings.gradle*",
          "pom.xml", "justfile", "Justfile", "Taskfile.y*ml")
_MANIFEST = ("package.json", "npm-shrinkwrap.json", "go.mod", "go.sum", "go.work", "go.work.sum", "Cargo.toml",
             "Cargo.lock", "pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in", "requirements*.txt",
             "requirements*.in", "constraints*.txt", "Pipfile*", "poetry.lock", "uv.lock", "pnpm-workspace.yaml",
             ".npmrc", ".yarnrc*", ".nvmrc", ".node-version", ".python-version", ".tool-versions", "Gemfile*",
             "*.gemspec", "environment.y*ml", "deno.json*", "bunfig.toml", "rust-toolchain*", ".cargo/config*")
_LOCK = re.compile(r"(^|[._-])(lock|lockfile)([._-]|$)|\.lockb?$", re.I)
_CONFIG = ("conftest.py", "pytest.ini", "tox.ini", "noxfile.py", ".coveragerc", "jest.config.*", "jest.preset.*",
           "vitest.config.*", "vitest.workspace.*", "vite.config.*", "babel.config.*", ".babelrc*", "tsconfig*.json",
           "jsconfig*.json", ".mocharc*", ".nycrc*", "karma.conf.*", "playwright.config.*", "ava.config.*",
           ".swcrc", ".env", ".env.*", "sitecustomize.py", "usercustomize.py")
_CODEGEN = ("*.proto", "*.thrift", "*.graphql", "*.gql", "openapi*.yaml", "openapi*.yml", "openapi*.json",
            "swagger*.yaml", "swagger*.yml", "swagger*.json", "*.avsc", "*.avdl", "*.fbs", "*.capnp", "*.smithy")
_NAMES_CONFIG = ("pytest.ini", "tox.ini", "noxfile.py", "jest.config.*", "jest.preset.*", "vitest.config.*",
                 "vitest.workspace.*", "vite.config.*", "babel.config.*", ".babelrc*", ".mocharc*", ".nycrc*",
                 "karma.conf.*", "playwright.config.*", "ava.config.*")  # they name the files every test loads
_DOC_NAMES = re.compile(r"^(README|LICEN[CS]E|COPYING|NOTICE|AUTHORS|CHANGELOG|CHANGES|HISTORY|CONTRIBUTING|"
                        r"CODE_OF_CONDUCT|SECURITY|MAINTAINERS|CODEOWNERS)([.-].*)?$", re.I)
_NOT_DOCS = {"fixtures", "__fixtures__", "testdata", "snapshots", "__snapshots__", "golden", "data"}


def _any(name: str, path: str, globs: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(path if "/" in g else name, g) or
               ("/" in g and fnmatch.fnmatchcase(path, "*/" + g)) for g in globs)


def why_not(path: str) -> str:
    """Why a change to this file is more than the import graph can follow ("" when it can)."""
    name = posixpath.basename(path)
    if _any(name, path, _BUILD):
        return f"{path}: a build file: the import graph cannot see what it changes"
    if _any(name, path, _MANIFEST) or (_LOCK.search(name) and not imports.is_code(path)):
        return f"{path}: a package manifest or lock file: the import graph cannot see what it changes"
    if _any(name, path, _CONFIG):
        return f"{path}: test configuration: it changes how the tests run"
    if _any(name, path, _CODEGEN):
        return f"{path}: a code generation input: what is generated from it is not in the tree the graph reads"
    return ""


def is_doc(path: str) -> bool:
    """Documentation: *.md, *.rst, *.txt, LICENSE, docs/...; never in a test folder or a fixture."""
    parts = path.split("/")
    if any(p in _NOT_DOCS or p in ("tests", "test", "__tests__", "testing") for p in parts[:-1]):
        return False
    return path.lower().endswith((*imports.DOC_EXTS, ".txt")) or bool(_DOC_NAMES.match(parts[-1])) or \
        parts[0] in ("docs", "doc") and not imports.is_code(path)


# --- the tests ----------------------------------------------------------------------------------------------------

_PY_TEST = re.compile(r"^(test_.*|.*_test|tests?)\.pyi?$")
_JS_TEST = re.compile(r"^(.*[._-](test|spec)|test-.*|test|spec)\.[cm]?[jt]sx?$")
_JS_TEST_DIRS = {"__tests__", "test"}


def test_kind(path: str) -> str | None:
    """python or js for a test file of those runners (by their default patterns), else None."""
    parts = path.split("/")
    if "node_modules" in parts or "site-packages" in parts:
        return None
    name = parts[-1]
    if name.endswith((".py", ".pyi")):
        return "python" if _PY_TEST.match(name) else None
    if name.endswith(resolve.JS_EXTS) and not name.endswith((".d.ts", ".d.mts", ".d.cts")):
        return "js" if _JS_TEST.match(name) or any(p in _JS_TEST_DIRS for p in parts[:-1]) else None
    return None


def go_package(folder: str, modules: dict[str, str]) -> str:
    """The import path of a Go package folder, from the go.mod that holds it ("./<folder>" without one)."""
    home = next((a for a in resolve.ancestors(folder) if a in modules), None)
    if home is None:
        return "./" + folder if folder else "."
    rest = folder[len(home):].lstrip("/")
    return f"{modules[home]}/{rest}" if rest else modules[home]


def _file_test(path: str, modules: dict[str, str]) -> tuple[str, str] | None:
    """(kind, name) when this file is a test: a python or js test file, a go test file's package."""
    kind = test_kind(path)
    if kind:
        return kind, path
    if path.endswith("_test.go") and not {"vendor", "testdata"} & set(path.split("/")[:-1]):
        return "go", go_package(posixpath.dirname(path), modules)
    return None


def _test_of(graph: resolve.Graph, node: int) -> tuple[str, str] | None:
    """(kind, name) when this node is a test, or the crate cargo selects by."""
    name = graph.names[node]
    if node < graph.files:
        return _file_test(name, graph.modules)
    if name.startswith("//crate/"):
        return "cargo", graph.crates.get(name[8:], name[8:])
    return None


def _all(paths: list[str], modules: dict[str, str], crates: dict[str, str]) -> dict[str, list[str]]:
    found: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for path in paths:
        if "test" in path or "spec" in path:  # (every test's path has one: the cheap test first, on 20,000 files)
            test = _file_test(path, modules)
            if test:
                found[test[0]].add(test[1])
    found["cargo"] = set(crates.values())
    return {kind: sorted(names) for kind, names in found.items()}


def _counts(graph: resolve.Graph) -> dict[str, int]:
    return {kind: len(names) for kind, names in _all(graph.paths(), graph.modules, graph.crates).items()}


def all_tests(repo: Path, rev: str) -> dict[str, list[str]]:
    """Every test of a revision, per kind (python and js files, go packages, cargo crates)."""
    return _all(*resolve.inventory(Path(repo), rev))


# --- what changed ---------------------------------------------------------------------------------------------------

def _lines(cwd: Path, *args: str) -> list[str]:
    proc = gitcmd.run(list(args), cwd=cwd, capture_output=True)
    if proc.returncode != 0:
        raise SymbolIndexError(f"git {' '.join(args)}: {proc.stderr.decode(errors='replace')[:300]}")
    return [p for p in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


def changed_files(repo: Path, since: str, head: str) -> list[str]:
    """The paths that differ between two commits; a rename gives both paths."""
    return sorted(set(_lines(Path(repo), "diff", "--name-only", "-z", "--no-renames", since, head, "--")))


def worktree_changes(tree: Path, since: str) -> list[str]:
    """A lane's worktree against `since`: what it committed since, plus what is uncommitted and untracked (not
    ignored)."""
    tree = Path(tree)
    return sorted(set(_lines(tree, "diff", "--name-only", "-z", "--no-renames", since, "--")) |
                  set(_lines(tree, "ls-files", "--others", "--exclude-standard", "-z")))


# --- the selection ----------------------------------------------------------------------------------------------------

_CODE_GLOBS = tuple(f"*{ext}" for ext in imports.CODE)
_TESTISH_GLOBS = ("*test*", "*spec*")  # test files, test folders (pathspec * crosses /), filtered after


def _mentions(where: Path, tree: str | None, names: set[str], tests_only: bool) -> dict[str, set[str]]:
    """basename -> the files of the tree (code, or tests only; and test configuration) whose text holds it. Of
    the revision `tree`, or with None of the worktree `where` (what the checks will run; and faster to read)."""
    if not names:
        return {}
    globs = [*(_TESTISH_GLOBS if tests_only else _CODE_GLOBS),
             *(":(glob)**/" + g for g in _NAMES_CONFIG if not g.endswith(".py"))]
    args = ["grep", "-z", "-o", "-F", "-I", "--no-color", "-f", "-", *([tree] if tree else []), "--", *globs]
    proc = gitcmd.run(args, cwd=where, capture_output=True, input="".join(f"{n}\n" for n in sorted(names)).encode())
    found: dict[str, set[str]] = {}
    if proc.returncode not in (0, 1):
        raise SymbolIndexError(f"git grep: {proc.stderr.decode(errors='replace')[:300]}")
    for line in proc.stdout.decode("utf-8", "surrogateescape").split("\n"):
        path, _, match = line.partition("\0")
        if match:
            found.setdefault(match, set()).add(path.partition(":")[2] if tree else path)
    return found


def _all_mentions(where: Path, tree: str | None, paths: tuple[str, ...]) -> dict[str, set[str]]:
    """Code is read by what imports it, and by the tests that name it (they open or run it): only tests are
    searched for a code file's name. Other files are read by whatever code names them."""
    code = {posixpath.basename(p) for p in paths if imports.is_code(p)}
    mentions = _mentions(where, tree, code, True)
    for base, found in _mentions(where, tree, {posixpath.basename(p) for p in paths} - code, False).items():
        mentions.setdefault(base, set()).update(found)
    return mentions


def _worktree_edges(worktree: Path, paths: list[str]) -> list[tuple[str, str]]:
    """What the worktree's versions say that the revision's graph may not: a Java file's package (files of one
    package read each other unnamed). (A changed file's own imports do not matter: it is affected itself.)"""
    edges = []
    for path in paths:
        if path.endswith(".java") and (worktree / path).is_file():
            for spec in imports.extract("java", (worktree / path).read_bytes()):
                if spec.startswith("p:"):
                    edges += [(path, "//java/" + spec[2:]), ("//java/" + spec[2:], path)]
    return edges


def _texts(worktree: Path | None, paths: tuple[str, ...]) -> dict[str, bytes]:
    """The worktree's versions of the changed code files (what they name counts as well as the revision's)."""
    out = {}
    for path in paths if worktree is not None else ():
        file = Path(worktree or ".") / path
        if imports.is_code(path) and file.is_file():
            with contextlib.suppress(OSError):
                out[path] = file.read_bytes()
    return out


def _named(texts: dict[str, bytes], names: set[str]) -> dict[str, set[str]]:
    """basename -> the files of `texts` that hold it."""
    found: dict[str, set[str]] = {}
    for name in names:
        key = name.encode()
        for path, text in texts.items():
            if key in text:  # (a substring search in C: a hundred names in a hundred files take milliseconds)
                found.setdefault(name, set()).add(path)
    return found


def _imports_another(graph: resolve.Graph, mentioner: str, path: str) -> bool:
    """Whether the name of `path` in `mentioner` is its import of another file of that name (`../lib.mjs` written
    in every test of a service, for its own service's lib.mjs): then the graph knows what it reads."""
    node = graph.index.get(mentioner)
    base = posixpath.basename(path)
    return node is not None and any(t < graph.files and graph.names[t] != path and
                                    posixpath.basename(graph.names[t]) == base for t in graph.reads(node))


def _fallback(changed: tuple[str, ...], why: str, graph: resolve.Graph) -> Affected:
    return Affected(changed, None, why, _counts(graph), {})


def affected(repo: Path, rev: str, changed: Iterable[str], *, worktree: Path | None = None,
             named_tests: bool = False) -> Affected:
    """The tests `changed` can reach in the graph of `rev` (with `worktree`: plus what its versions of the changed
    files say), or why the graph cannot tell. `named_tests`: a changed test file that test configuration names is
    taken as a test it runs (tox's `commands = pytest tests/test_x.py`), not as what every test may load (jest's
    setupFiles): for the base-tests comparison's second run (second_run.py), whose changes are all test paths."""
    repo = Path(repo)
    paths = tuple(sorted({posixpath.normpath(p).removeprefix("./") for p in changed if p and p.strip("./")}))
    reasons = [(p, w) for p in paths if (w := why_not(p))]
    reasons += [(p, f"{p}: a name too short to search the code for: it may still be read") for p in paths
                if len(posixpath.basename(p)) < MIN_NAME]
    with ThreadPoolExecutor(1) as pool:  # git searches the text while the graph loads
        where, tree = (Path(worktree), None) if worktree is not None else (repo, imports.tree_of(repo, rev))
        searched = None if reasons else pool.submit(_all_mentions, where, tree, paths)
        graph = resolve.load(repo, rev, paths)
        if reasons or searched is None:
            more = f" (and {len(reasons) - 1} more such change{'s' if len(reasons) > 2 else ''})" \
                if len(reasons) > 1 else ""
            return _fallback(paths, reasons[0][1] + more, graph)
        mentions = searched.result()
    if worktree is not None:
        graph.add(_worktree_edges(Path(worktree), list(paths)))
    index, readers = graph.index, graph.readers()
    for base, found in _named(_texts(worktree, paths), {posixpath.basename(p) for p in paths}).items():
        mentions.setdefault(base, set()).update(found)
    seeds: dict[int, str] = {}
    ignored = []
    for path in paths:
        base = posixpath.basename(path)
        named = sorted(m for m in mentions.get(base, ()) if m != path)
        config = [m for m in named if _any(posixpath.basename(m), m, _NAMES_CONFIG)]
        if config and not (named_tests and _file_test(path, graph.modules)):
            return _fallback(paths, f"{path}: named by {config[0]}, test configuration: it may be what every test "
                                    "loads", graph)
        named = [m for m in named if not _imports_another(graph, m, path)]
        node = index.get(path)
        if imports.is_code(path):
            named = [m for m in named if (test_kind(m) or m.endswith("_test.go") or is_test_path(m)) and
                     imports.is_code(m)]
        elif not named and not (node is not None and readers[node]):
            if is_doc(path):
                ignored.append(path)
                continue
            return _fallback(paths, f"{path}: a file of a kind the import graph does not parse, and no code names "
                                    "it: it may still be read", graph)
        for seed in ([node] if node is not None else []) + [index[m] for m in named if m in index]:
            seeds.setdefault(seed, path)
    return _select(graph, paths, seeds, tuple(ignored), worktree)


def _select(graph: resolve.Graph, paths: tuple[str, ...], seeds: dict[int, str], ignored: tuple[str, ...],
            worktree: Path | None) -> Affected:
    """Every node that reads a seed, transitively (breadth first, so each test's `why` is a nearest change)."""
    readers = graph.readers()
    origin = dict(seeds)
    queue = deque(sorted(seeds))
    while queue:
        node = queue.popleft()
        for reader in readers[node]:
            if reader not in origin:
                origin[reader] = origin[node]
                queue.append(reader)
    names: dict[str, set[str]] = {kind: set() for kind in KINDS}
    why: dict[str, str] = {}
    for node, source in origin.items():
        test = _test_of(graph, node)
        if test is None:
            continue
        kind, name = test
        if kind in ("python", "js") and worktree is not None and not (Path(worktree) / name).is_file():
            continue  # a test the change deleted: nothing to run
        names[kind].add(name)
        why.setdefault(name, source)
    kept = {name: why[name] for name in sorted(why)[:MAX_WHY]}
    return Affected(paths, {k: sorted(v) for k, v in names.items()}, "", _counts(graph), kept, ignored)

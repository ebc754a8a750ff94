"""The import graph of a git revision: the specifiers reposwarm/checks/selection/imports.py finds, resolved to the tree's files.

Nodes are the tree's files (sorted, first) and groups: "//go/<dir>" a Go package, "//gotest/<dir>" its tests,
"//crate/<dir>" a Cargo crate, "//npm/<dir>" a package.json's package, "//java/<package>", "//dir/<dir>" every
file below a folder. An edge says "reads": a file reads what it imports, a group its members, a member its group
where members read each other (a Go package, a crate, a Java package). Resolution over-approximates: every
candidate a specifier could mean that the tree has is read (all of a suffix's files, every extension tried).
Built in a second on a 4M-line tree; cached per tree in the imports cache, so a warm load unpacks a blob.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import posixpath
import re
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from reposwarm.checks.selection import imports
from reposwarm.checks.testpaths import is_test_path

JS_EXTS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts")
_JS_TRY = (*JS_EXTS, ".d.ts", ".json", ".node")
_JS_AS_TS = {".js": (".ts", ".tsx", ".d.ts"), ".jsx": (".tsx",), ".mjs": (".mts", ".d.mts"), ".cjs": (".cts",)}
_PY_TRY = (".py", ".pyi", "/__init__.py", "/__init__.pyi")
PY_TEST = re.compile(r"^(test_.*|.*_test)\.py$")


@dataclass
class Graph:
    """Nodes 0..files-1 are the tree's files, then groups; edge i: names[src[i]] reads names[dst[i]]."""

    files: int
    names: list[str]
    src: array
    dst: array
    modules: dict[str, str]  # go.mod folder -> module path
    crates: dict[str, str]  # Cargo.toml folder -> crate name
    _readers: list[list[int]] | None = field(default=None, repr=False)
    _index: dict[str, int] | None = field(default=None, repr=False)

    @property
    def index(self) -> dict[str, int]:
        if self._index is None:
            self._index = {name: i for i, name in enumerate(self.names)}
        return self._index

    def readers(self) -> list[list[int]]:
        """Per node, the nodes that read it (the edges reversed)."""
        if self._readers is None:
            out: list[list[int]] = [[] for _ in self.names]
            for a, b in zip(self.src, self.dst, strict=True):
                out[b].append(a)
            self._readers = out
        return self._readers

    def reads(self, node: int) -> list[int]:
        """The nodes one node reads (its edges: src is sorted, as built)."""
        start = bisect_left(self.src, node)
        end = bisect_left(self.src, node + 1, start)
        return list(self.dst[start:end])

    def paths(self) -> list[str]:
        return self.names[:self.files]

    def add(self, pairs: Iterable[tuple[str, str]]) -> None:
        """More edges by node name (what a worktree's version of a file says); a new name is a new node."""
        pairs = list(pairs)
        if not pairs:
            return
        edges = set(zip(self.src, self.dst, strict=True))
        for a, b in pairs:
            for name in (a, b):
                if name not in self.index:
                    self.index[name] = len(self.names)
                    self.names.append(name)
            edges.add((self.index[a], self.index[b]))
        ordered = sorted(edges)  # (kept sorted by source: `reads` bisects)
        self.src, self.dst = array("i", (a for a, _ in ordered)), array("i", (b for _, b in ordered))
        self._readers = None

    def pack(self) -> bytes:
        head = json.dumps([self.files, self.names, self.modules, self.crates]).encode()
        return zlib.compress(b"%d\n" % len(head) + head + self.src.tobytes() + self.dst.tobytes(), 1)

    @classmethod
    def unpack(cls, data: bytes) -> Graph:
        size, _, rest = zlib.decompress(data).partition(b"\n")
        files, names, modules, crates = json.loads(rest[:int(size)])
        edges = array("i")
        edges.frombytes(rest[int(size):])
        half = len(edges) // 2
        return cls(files, names, edges[:half], edges[half:], modules, crates)


def load(repo: Path, rev: str, extra: Iterable[str] = ()) -> Graph:
    """The graph of a revision, its files with the `extra` paths as though they were there too (a change's added
    and deleted files: an import of a file the revision lacks still resolves to it). Cached per tree and extras."""
    tree = imports.tree_of(repo, rev)
    cache = imports.Cache(imports.db_path(repo))
    try:
        packed = cache.graph(tree)
        graph = Graph.unpack(packed) if packed else None
        listed = None if graph else imports.entries(repo, tree)
        added = sorted(set(extra) - set(graph.paths() if graph else listed[0] if listed else ()))
        if graph is not None and not added:
            return graph
        key = tree + ("+" + hashlib.sha1("\n".join(added).encode()).hexdigest() if added else "")
        packed = cache.graph(key) if added else None
        if packed:
            return Graph.unpack(packed)
        files, links = listed or imports.entries(repo, tree)
        specs = imports.read_specs(repo, cache, files, links)
        specs.update({path: [] for path in added})
        graph = build(specs, links)
        cache.put_graph(key, graph.pack())
        return graph
    finally:
        cache.close()


def inventory(repo: Path, rev: str) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """A revision's files, its go.mod folders' module paths and its crates' names: from its cached graph, else
    from its listing and manifests alone (no graph built for them)."""
    tree = imports.tree_of(repo, rev)
    cache = imports.Cache(imports.db_path(repo))
    try:
        packed = cache.graph(tree)
        if packed:
            graph = Graph.unpack(packed)
            return graph.paths(), graph.modules, graph.crates
        files, _ = imports.entries(repo, tree)
        manifests = {p: sha for p, sha in files.items() if p.rpartition("/")[2] in ("go.mod", "Cargo.toml")}
        return sorted(files), *units(imports.read_specs(repo, cache, manifests, set()))
    finally:
        cache.close()


def units(specs: dict[str, list[str]]) -> tuple[dict[str, str], dict[str, str]]:
    """go.mod folder -> its module path; Cargo.toml folder -> its crate's name (a workspace root is no crate)."""
    modules: dict[str, str] = {}
    crates: dict[str, str] = {}
    for path, found in specs.items():
        name, folder = path.rpartition("/")[2], path.rpartition("/")[0]
        for spec in found if name in ("go.mod", "Cargo.toml") else ():
            if spec.startswith("m:") and name == "go.mod":
                modules[folder] = spec[2:]
            elif spec.startswith("n:") and name == "Cargo.toml":
                crates[folder] = spec[2:]
    return modules, crates


def build(specs: dict[str, list[str]], links: Iterable[str] = ()) -> Graph:
    """The graph of a tree whose files (all of them, each with its specifiers) these are; `links`: which of them
    are symbolic links (one reads its target)."""
    return _Build(specs, set(links)).graph()


def prefix_range(paths: list[str], folder: str) -> list[str]:
    """The sorted `paths` below `folder` ("" for all)."""
    if not folder:
        return paths
    return paths[bisect_left(paths, folder + "/"):bisect_left(paths, folder + "0")]  # "0" sorts right after "/"


def ancestors(folder: str) -> Iterator[str]:
    """The folder, each folder above it, then "" (the root)."""
    while folder:
        yield folder
        folder = posixpath.dirname(folder)
    yield ""


def _join(*parts: str) -> str:
    return posixpath.normpath(posixpath.join(*parts)).removeprefix("./") if any(parts) else ""


class _Build:
    def __init__(self, specs: dict[str, list[str]], links: set[str]) -> None:
        # a link is a file of its language (what imports it resolves to it) that imports nothing but its target
        self.targets = {path: specs[path] for path in links if path in specs}
        self.specs = {path: [] if path in links else found for path, found in specs.items()}
        self.paths = sorted(specs)
        self.fileset = set(self.paths)
        self.names = list(self.paths)
        self.ids = {p: i for i, p in enumerate(self.paths)}
        self.pairs: set[tuple[int, int]] = set()
        self.kind: dict[str, list[str]] = {}
        for path in self.paths:
            self.kind.setdefault(imports.kind_of(path) or "", []).append(path)
        self.grown: set[str] = set()  # groups whose members are in
        self.modules, self.crates = units(specs)

    def node(self, name: str) -> int:
        found = self.ids.get(name)
        if found is None:
            found = self.ids[name] = len(self.names)
            self.names.append(name)
        return found

    def edge(self, a: str, b: str) -> None:
        self.pairs.add((self.node(a), self.node(b)))

    def edges(self, a: str, targets: Iterable[int]) -> None:
        source = self.node(a)
        self.pairs.update((source, t) for t in targets)

    def graph(self) -> Graph:
        self.python()
        self.js()
        self.go()
        self.java()
        self.rust()
        for path, specs in sorted(self.targets.items()):  # a link reads its target: the file, or what is below it
            for spec in specs:
                target = _join(path.rpartition("/")[0], spec[2:])
                if target in self.fileset:
                    self.edge(path, target)
                elif prefix_range(self.paths, target) and not target.startswith("../"):
                    self.edge(path, self._below(target))
        pairs = sorted(self.pairs)
        return Graph(len(self.paths), self.names, array("i", (a for a, _ in pairs)), array("i", (b for _, b in pairs)),
                     self.modules, self.crates)

    # --- Python ---

    def python(self) -> None:
        files = self.kind.get("py", [])
        mods: dict[str, list[str]] = {}
        inits: dict[str, list[str]] = {}
        for path in files:
            stem, name = path.rsplit(".", 1)[0], path.rpartition("/")[2]
            if name.startswith("__init__."):
                stem = path.rpartition("/")[0]
                inits.setdefault(stem, []).append(path)
            parts = stem.split("/") if stem else []
            for i in range(len(parts)):
                mods.setdefault(".".join(parts[i:]), []).append(path)
        conftests = {p.rpartition("/")[0] for p in files if p.rpartition("/")[2] == "conftest.py"}
        above: dict[str, tuple[list[int], list[int]]] = {}  # folder -> the __init__.py and conftest.py above it
        resolved: dict[tuple[str, str], list[int]] = {}
        for path in files:
            folder = path.rpartition("/")[0]
            up = above.get(folder)
            if up is None:
                folders = list(ancestors(folder))
                up = above[folder] = ([self.ids[i] for a in folders for i in inits.get(a, ())],
                                      [self.ids[_join(a, "conftest.py")] for a in folders if a in conftests])
            me = self.ids[path]
            self.pairs.update((me, i) for i in up[0] if i != me)  # importing a module runs its packages' __init__
            if up[1] and PY_TEST.match(path.rpartition("/")[2]):
                self.pairs.update((me, c) for c in up[1])
            for spec in self.specs[path]:
                key = (folder if spec.startswith(".") else "", spec)
                targets = resolved.get(key)
                if targets is None:
                    targets = resolved[key] = [self.ids[t] for t in self._python(spec, folder, mods)]
                self.pairs.update((me, t) for t in targets)

    def _python(self, spec: str, folder: str, mods: dict[str, list[str]]) -> Iterator[str]:
        module, _, names = spec.partition(":")
        subs = [n for n in names.split(",") if n and n != "*"]
        if module.startswith("."):
            level = len(module) - len(module.lstrip("."))
            for _ in range(level - 1):
                folder = posixpath.dirname(folder)
            root = _join(folder, *module[level:].split(".")) if module[level:] else folder
            tries = [root + e for e in _PY_TRY] + [_join(root, n) + e for n in subs for e in _PY_TRY]
            yield from (t for t in tries if t in self.fileset)
            return
        found = [t for key in [module, *(f"{module}.{n}" for n in subs)] for t in mods.get(key, ())]
        while not found and "." in module:  # a.b.c the tree does not have: a.b may still be its package
            module = module.rsplit(".", 1)[0]
            found = mods.get(module, [])
        yield from found

    # --- JavaScript and TypeScript ---

    def js(self) -> None:
        files = self.kind.get("js", [])
        if not files:
            return
        self.npm: dict[str, list[str]] = {}
        for path in self.kind.get("npm", []):
            for spec in self.specs[path]:
                self.npm.setdefault(spec[2:], []).append(posixpath.dirname(path))
        self.npm_dirs = {posixpath.dirname(p) for p in self.kind.get("npm", [])}
        self.aliases: dict[str, list[tuple[str, list[str]]]] = {}
        self.bases: dict[str, list[str]] = {}
        for path in self.kind.get("tsconfig", []):
            folder = posixpath.dirname(path)
            for spec in self.specs[path]:
                if spec.startswith("b:"):
                    self.bases.setdefault(folder, []).append(spec[2:])
                elif spec.startswith("a:"):
                    alias, _, targets = spec[2:].partition("=")
                    self.aliases.setdefault(folder, []).append((alias, targets.split("|")))
        resolved: dict[tuple[str, str], list[int]] = {}
        for path in files:
            folder = path.rpartition("/")[0]
            for spec in self.specs[path]:
                found = resolved.get((folder, spec))
                if found is None:
                    found = resolved[(folder, spec)] = [self.node(t) for t in self._js(spec, folder)]
                self.edges(path, found)

    def _js_file(self, base: str) -> list[str]:
        tries = [base, *(base + e for e in _JS_TRY), *(f"{base}/index{e}" for e in _JS_TRY)]
        stem, ext = posixpath.splitext(base)
        tries += [stem + e for e in _JS_AS_TS.get(ext, ())]
        found = [t for t in tries if t in self.fileset]
        if base in self.npm_dirs:
            found.append(self._npm(base))
        return found

    def _js(self, spec: str, folder: str) -> list[str]:
        if spec.startswith("`"):  # a template literal: everything below the folder it names
            text = spec[1:]
            if not text.startswith(("./", "../")):
                return []
            return [self._below(_join(folder, text) if text.endswith("/") else posixpath.dirname(_join(folder, text)))]
        if spec.startswith(("./", "../")) or spec in (".", ".."):
            return self._js_file(_join(folder, spec))
        if spec.startswith("/") or spec.startswith("node:") or not spec:
            return []
        out: list[str] = []
        parts = spec.split("/")
        name = "/".join(parts[:2]) if spec.startswith("@") and len(parts) > 1 else parts[0]
        for home in self.npm.get(name, ()):
            out.append(self._npm(home))
            if spec != name:
                out += self._js_file(_join(home, spec[len(name) + 1:]))
        for above in ancestors(folder):
            for alias, targets in self.aliases.get(above, ()):
                star = alias.endswith("*")
                if spec == alias or (star and spec.startswith(alias[:-1])):
                    rest = spec[len(alias) - 1:] if star else ""
                    out += [f for t in targets for f in self._js_file(_join(above, t.replace("*", rest)))]
            out += [f for base in self.bases.get(above, ()) for f in self._js_file(_join(above, base, spec))]
            if spec.startswith(("@/", "~/", "#")):  # the usual aliases of a project's source folder
                rest = spec[1:].lstrip("/")
                out += self._js_file(_join(above, "src", rest)) + self._js_file(_join(above, rest))
        return out

    def _npm(self, home: str) -> str:
        """The group of a package.json's package: its files (not its tests, nor a nested package's)."""
        group = "//npm/" + home
        if group not in self.grown:
            self.grown.add(group)
            for path in prefix_range(self.paths, home):
                rel = path[len(home):].lstrip("/")
                if is_test_path(rel) or path.endswith(imports.DOC_EXTS) or "node_modules/" in rel:
                    continue
                if next(a for a in ancestors(posixpath.dirname(path)) if a in self.npm_dirs or a == "") == home:
                    self.edge(group, path)
        return group

    def _below(self, folder: str) -> str:
        group = "//dir/" + folder
        if group not in self.grown:
            self.grown.add(group)
            for path in prefix_range(self.paths, folder):
                self.edge(group, path)
        return group

    # --- Go ---

    def go(self) -> None:
        files = self.kind.get("go", [])
        if not files:
            return
        by_module: dict[str, list[str]] = {}
        for folder, module in self.modules.items():
            by_module.setdefault(module, []).append(folder)
        dirs = {posixpath.dirname(p) for p in files}
        vendors = sorted({"/".join(d.split("/")[:d.split("/").index("vendor") + 1]) for d in dirs
                          if "vendor" in d.split("/")})
        resolved: dict[str, list[int]] = {}
        for path in files:
            folder = path.rpartition("/")[0]
            own = ("//gotest/" if path.endswith("_test.go") else "//go/") + folder
            self.edge(path, own)
            self.edge(own, path)
            if own.startswith("//gotest/"):
                self.edge(own, "//go/" + folder)
            for spec in self.specs[path]:
                if spec.startswith("e:"):
                    pattern = _join(folder, spec[2:].removeprefix("all:"))
                    self.edges(path, (self.ids[t] for t in prefix_range(self.paths, folder)
                                      if t != path and imports_match(t, pattern)))
                    continue
                targets = resolved.get(spec)
                if targets is None:
                    targets = resolved[spec] = [self.node("//go/" + d) for d in self._go(spec[2:], by_module, dirs,
                                                                                         vendors)]
                self.edges(path, targets)
        for path in self.paths:  # a package's testdata/ is its tests' to read
            parts = path.split("/")
            if "testdata" in parts[:-1]:
                home = "/".join(parts[:parts.index("testdata")])
                if home in dirs:
                    self.edge("//gotest/" + home, path)

    @staticmethod
    def _go(spec: str, by_module: dict[str, list[str]], dirs: set[str], vendors: list[str]) -> Iterator[str]:
        """The package folders an import path names: below each go.mod whose module path begins it, or vendored."""
        segments = spec.split("/")
        for k in range(len(segments), 0, -1):
            for home in by_module.get("/".join(segments[:k]), ()):
                target = _join(home, *segments[k:])
                if target in dirs:
                    yield target
        yield from (_join(v, spec) for v in vendors if _join(v, spec) in dirs)

    # --- Java ---

    def java(self) -> None:
        files = self.kind.get("java", [])
        packages: set[str] = set()
        classes: dict[tuple[str, str], list[str]] = {}
        for path in files:
            package = next((s[2:] for s in self.specs[path] if s.startswith("p:")), "")
            packages.add(package)
            classes.setdefault((package, posixpath.basename(path)[:-5]), []).append(path)
            self.edge(path, "//java/" + package)
            self.edge("//java/" + package, path)
        for path in files:
            for spec in self.specs[path]:
                if not spec.startswith("i:"):
                    continue
                parts = spec[2:].split(".")
                for k in range(len(parts) - 1, 0, -1):  # a.b.C.Inner: the class C of package a.b
                    package, name = ".".join(parts[:k]), parts[k]
                    if name == "*" and package in packages:
                        self.edge(path, "//java/" + package)
                    for target in classes.get((package, name), ()):
                        self.edge(path, target)

    # --- Rust ---

    def rust(self) -> None:
        by_name: dict[str, list[str]] = {}
        shared: dict[str, list[str]] = {}  # [workspace.dependencies] key -> crate folders or names
        for path in self.kind.get("cargo", []):
            folder = posixpath.dirname(path)
            for spec in self.specs[path]:
                if spec.startswith("n:"):
                    by_name.setdefault(spec[2:].replace("-", "_"), []).append(folder)
                elif spec.startswith("w:"):
                    key, _, value = spec[2:].partition("=")
                    shared.setdefault(key.replace("-", "_"), []).append(
                        _join(folder, value[1:]) if value[:1] == "p" else value[1:].replace("-", "_"))
        if not self.crates:
            return
        for path in self.kind.get("cargo", []):
            folder = posixpath.dirname(path)
            if folder not in self.crates:
                continue
            for spec in self.specs[path]:
                if not spec.startswith("d:"):
                    continue
                key, _, value = spec[2:].partition("=")
                key = key.replace("-", "_")
                wanted = [*by_name.get(key, ()), *(d for s in shared.get(key, ()) for d in [s, *by_name.get(s, ())])]
                if value[:1] == "p":
                    wanted.append(_join(folder, value[1:]))
                elif value[:1] == "k":
                    wanted += by_name.get(value[1:].replace("-", "_"), ())
                for target in wanted:
                    if target in self.crates and target != folder:
                        self.edge("//crate/" + folder, "//crate/" + target)
        for path in self.paths:  # a crate's files (not its docs, nor a build's output) are the crate
            if path.endswith(imports.DOC_EXTS) or "target" in path.split("/")[:-1]:
                continue
            home = next((a for a in ancestors(posixpath.dirname(path)) if a in self.crates), None)
            if home is not None:
                self.edge(path, "//crate/" + home)
                self.edge("//crate/" + home, path)


def imports_match(path: str, pattern: str) -> bool:
    """A path a //go:embed pattern names: the file, a file below the folder, or a glob's match."""
    return path == pattern or path.startswith(pattern + "/") or fnmatch.fnmatchcase(path, pattern)

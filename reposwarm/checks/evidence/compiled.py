"""Go and Rust: what the build compiled and tested, read from the command's own output (no collector runs).

Go: `go test` builds every package it tests from the tree (module-aware), and says per package whether it ran
tests (`-json` events, which reposwarm's runner adds, or the text lines `ok`, `FAIL`, `?  ... [no test files]`).
A changed .go file was loaded when its package ran tests, or is imported, directly or through other packages of the
tree, by a package that did (its code is compiled into that test binary; the imports are read from the files'
import blocks); a package with no test files that no tested package imports was not exercised. Build tags are not
read: a file excluded by its tags counts with its package.

Rust: cargo names the test binaries it runs (`Running unittests src/lib.rs (target/debug/deps/name-hash)`,
`Doc-tests name`): a changed .rs file of a crate (the nearest Cargo.toml with a [package]) whose tests ran was
loaded. Any other is unknown (it may be built into another crate's tests as a dependency), never "not loaded".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from reposwarm.checks.evidence.files import TreeFiles, read_capped
from reposwarm.checks.runners.parsers import go_events

GO_FILE_HEAD = 256 * 1024  # the import block is at the top of a file
_MODULE = re.compile(r"^\s*module\s+\"?([^\s\"]+)\"?", re.M)
_GO_LINE = re.compile(r"^(ok|FAIL|\?)[ \t]+(\S+)[ \t]*(.*)$", re.M)
_IMPORT_ONE = re.compile(r"^\s*import\s+(?:[\w.]+\s+)?\"([^\"]+)\"", re.M)
_IMPORT_BLOCK = re.compile(r"^\s*import\s*\((.*?)\)", re.M | re.S)
_IMPORT_SPEC = re.compile(r"^\s*(?:[\w.]+\s+)?\"([^\"]+)\"", re.M)


@dataclass
class GoPackages:
    tested: set[str] = field(default_factory=set)  # import paths that ran tests (passed or failed)
    no_tests: set[str] = field(default_factory=set)  # "[no test files]"


def go_packages(output: str) -> GoPackages | None:
    """What `go test` said per package; None when its output names no package (it did not get to testing)."""
    found = GoPackages()
    events = go_events(output)
    ended: set[str] = set()  # a package-level pass or fail
    broken: set[str] = set()  # it did not build: no test of it ran
    for event in events:
        package, action = event.get("Package"), event.get("Action")
        if not isinstance(package, str) or not package:
            continue
        said = str(event.get("Output", ""))
        if event.get("Test") and action in ("run", "pass", "fail"):
            found.tested.add(package)
        elif action == "output" and "[no test files]" in said:
            found.no_tests.add(package)
        elif action == "output" and ("[build failed]" in said or "[setup failed]" in said):
            broken.add(package)
        elif action in ("pass", "fail") and not event.get("Test"):
            ended.add(package)
    found.tested |= ended - broken - found.no_tests
    if not events:
        for verdict, package, rest in _GO_LINE.findall(output):
            if "[build failed]" not in rest and "[setup failed]" not in rest:
                (found.no_tests if verdict == "?" else found.tested).add(package)
    found.no_tests -= found.tested
    return found if found.tested or found.no_tests else None


@dataclass
class GoTree:
    """The tree's Go modules: each go.mod's folder and module path."""

    files: TreeFiles
    modules: dict[str, str] = field(default_factory=dict)  # folder ("" the top) -> module path

    @classmethod
    def of(cls, files: TreeFiles) -> GoTree:
        tree = cls(files)
        for f in files.files:
            if f == "go.mod" or f.endswith("/go.mod"):
                data = read_capped(files.root / f, 1024 * 1024)
                found = _MODULE.search(data.decode("utf-8", "replace")) if data else None
                if found:
                    tree.modules[f.rsplit("/", 1)[0] if "/" in f else ""] = found.group(1)
        return tree

    def package(self, folder: str) -> str | None:
        """The import path of the package in `folder` (its nearest go.mod's module, and the path below it)."""
        parts = folder.split("/") if folder else []
        for depth in range(len(parts), -1, -1):
            top = "/".join(parts[:depth])
            if top in self.modules:
                return "/".join([self.modules[top], *parts[depth:]])
        return None

    def folder(self, package: str) -> str | None:
        best = None
        for top, module in self.modules.items():
            if package == module or package.startswith(module + "/"):
                if best is None or len(module) > len(self.modules[best]):
                    best = top
        if best is None:
            return None
        rest = package[len(self.modules[best]):].lstrip("/")
        return "/".join(p for p in (best, rest) if p)

    def imports(self, folder: str) -> set[str]:
        found: set[str] = set()
        for f in self.files.files:
            if f.endswith(".go") and (f.rsplit("/", 1)[0] if "/" in f else "") == folder:
                data = read_capped(self.files.root / f, 64 * 1024 * 1024)
                text = data[:GO_FILE_HEAD].decode("utf-8", "replace") if data else ""
                found.update(_IMPORT_ONE.findall(text))
                for block in _IMPORT_BLOCK.findall(text):
                    found.update(_IMPORT_SPEC.findall(block))
        return found

    def built(self, tested: set[str]) -> set[str]:
        """The tree's folders compiled into the tests that ran: the tested packages and what they import."""
        todo = [f for f in (self.folder(p) for p in tested) if f is not None]
        seen: set[str] = set()
        while todo:
            folder = todo.pop()
            if folder in seen:
                continue
            seen.add(folder)
            todo += [f for f in (self.folder(p) for p in self.imports(folder)) if f is not None and f not in seen]
        return seen


# --- Rust ---

_CARGO_RUNNING = re.compile(r"^\s*Running (?:unittests )?\S+ \((?:[^)\s]*/)?deps/([A-Za-z0-9_]+)-[0-9a-f]+\)", re.M)
_CARGO_DOC = re.compile(r"^\s*Doc-tests ([A-Za-z0-9_-]+)", re.M)
_CARGO_NAME = re.compile(r"^\s*\[package\][^\[]*?^\s*name\s*=\s*\"([^\"]+)\"", re.M | re.S)


def cargo_crates(output: str) -> set[str] | None:
    """The crates (names with `_`) whose tests cargo ran; None when it ran none."""
    found = {n.replace("-", "_") for n in _CARGO_RUNNING.findall(output) + _CARGO_DOC.findall(output)}
    return found or None


def crate_of(files: TreeFiles, rel: str) -> str | None:
    """The package name (with `_`) of the nearest Cargo.toml above `rel` that has one."""
    parts = rel.split("/")[:-1]
    while True:
        manifest = "/".join([*parts, "Cargo.toml"])
        if files.own(manifest):
            data = read_capped(files.root / manifest, 1024 * 1024)
            found = _CARGO_NAME.search(data.decode("utf-8", "replace")) if data else None
            if found:
                return found.group(1).replace("-", "_")
        if not parts:
            return None
        parts.pop()

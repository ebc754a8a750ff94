"""Node: which scripts a check's node processes ran, from V8's own coverage.

`NODE_V8_COVERAGE=<folder>` in the command's environment makes every node process (and worker thread: vitest's
and jest's workers too) write, as it ends, a JSON file listing each script it ran (`result[].url`) with its
functions' block ranges and counts. `read` takes the scripts under the tree: the tree's own files were loaded from
the tree; a script under the tree's root that is not one of its files and not in node_modules is a build (an
ignored `dist/`, `build/`, `lib/`...).

A changed source file that no process ran, while a build of it was run, ran as that build (`builds`). Which build
is a changed file's: one whose source map (`x.js.map`, or inline) lists it; else one of the same path under the
package's build folder (`src/a/b.ts` and `dist/a/b.js`); else any build of the same package (the folder of the
nearest package.json). The rule for a stale build: **a build older than the changed file** (its modification
time before the changed file's) was not made from this version of it: the check ran another copy of the code, and
the file is loaded from outside ("dist/index.js: a build older than src/index.ts, not made from this tree"). A
build at least as new was made after the file was written (by the check's setup step or by the command itself,
`tsc && node --test dist/`): the file ran, as that build. (A checked tree is a fresh checkout, so its files are as
new as the check; a build restored from a cache, or bound from the user's checkout, is older.)

Changed lines executed (diff coverage), where the script V8 ran is the file itself (plain JavaScript node loads as
it is; its top-level range is the file's length): a line ran when the innermost block holding its first character
ran. Transformed code (TypeScript, babel, a bundler) is not mapped back through source maps: no lines, said.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from reposwarm.checks.evidence.files import Budget, TreeFiles, mtime, read_capped
from reposwarm.checks.exercised import language

FOLDER = "evidence-v8"
VARIABLE = "NODE_V8_COVERAGE"
_URL = re.compile(rb'"url":"((?:[^"\\]|\\.)*)"')
BUILD_FOLDERS = ("dist", "build", "lib", "out", "es", "esm", "cjs", "umd", "compiled")
SOURCE_FOLDERS = ("src", "lib", "source", "sources")
MAP_MAX_BYTES = 32 * 1024 * 1024
INLINE_MAP_TAIL = 4 * 1024 * 1024
_INLINE = re.compile(rb"sourceMappingURL=data:application/json;(?:charset=[\w-]+;)?base64,([A-Za-z0-9+/=]+)")


# Preloaded in every node process (NODE_OPTIONS=--require): a process ended by SIGTERM writes no coverage, and
# vitest's default pool (forks, through tinypool) ends its workers so. On SIGTERM it writes the coverage first
# (v8.takeCoverage, node 15.1+), then, when it is the only listener, dies of the signal as it would have.
HOOK = """"use strict";
try {
  const v8 = require("v8");
  if (process.env.NODE_V8_COVERAGE && typeof v8.takeCoverage === "function") {
    const onTerm = function () {
      try { v8.takeCoverage(); } catch (e) {}
      if (process.listenerCount("SIGTERM") === 1) {
        process.removeListener("SIGTERM", onTerm);
        process.kill(process.pid, "SIGTERM");
      }
    };
    process.on("SIGTERM", onTerm);
  }
} catch (e) {}
"""
HOOK_FOLDER = "evidence-node"
_TEST_FILE = re.compile(r"(^|/)(__tests__|tests?|spec|specs)/|\.(test|spec)\.[cm]?[jt]sx?$")


def start(reports: Path, node_options: str | None) -> tuple[Path, dict[str, str]]:
    """The coverage folder, and the command's environment additions (`node_options`: what NODE_OPTIONS it has)."""
    out, hooks = reports / FOLDER, reports / HOOK_FOLDER
    out.mkdir()
    hooks.mkdir()
    hook = hooks / "sigterm.cjs"
    hook.write_text(HOOK, encoding="utf-8")
    quoted = '"' + str(hook).replace("\\", "\\\\").replace('"', '\\"') + '"'
    return out, {VARIABLE: str(out), "NODE_OPTIONS": " ".join(o for o in (node_options, f"--require {quoted}") if o)}


def ran_tests(read: Read) -> bool:
    """Whether some process ran a test file of the tree (else the coverage is its runner's own, not its tests')."""
    return any(_TEST_FILE.search(script) for p in read.processes for script in p.scripts)


def script_path(url: str) -> str | None:
    """A V8 script url as a file path: `file:///a/b.js`, or the path itself (jest's and vitest's vm scripts);
    None for node's own (`node:internal/...`), evaluated code and anything else."""
    if url.startswith("file://"):
        return unquote(urlsplit(url).path) or None
    if url.startswith("/"):
        return url.split("?", 1)[0].split("#", 1)[0]
    return None


@dataclass
class Process:
    file: str  # its coverage file's name
    scripts: list[str]  # tree-relative: the tree's files and its builds (node_modules left out)
    elsewhere: int  # scripts outside the tree (node's own, global packages)


@dataclass
class Read:
    processes: list[Process] = field(default_factory=list)
    inside: set[str] = field(default_factory=set)
    builds: set[str] = field(default_factory=set)  # loaded scripts under the root, not the tree's, not node_modules
    functions: dict[str, list[list[dict[str, Any]]]] = field(default_factory=dict)  # watched file -> per process


def read(folder: Path, files: TreeFiles, budget: Budget, watched: set[str], lines_wanted: set[str]) -> Read:
    out = Read()
    for path, data in budget.evidence(folder, ".json"):
        urls = []
        for match in _URL.finditer(data):
            try:
                urls.append(json.loads(b'"' + match.group(1) + b'"'))
            except ValueError:
                continue
        scripts, elsewhere, measure = [], 0, []
        for url in urls:
            found = script_path(url) if isinstance(url, str) else None
            rel = files.relative(found) if found else None
            if rel is None:
                elsewhere += 1
                continue
            if files.own(rel):
                out.inside.add(rel)
                scripts.append(rel)
                if rel in lines_wanted:
                    measure.append(url)
            elif "node_modules" not in rel.split("/") and language(rel) == "node":
                out.builds.add(rel)
                scripts.append(rel)
        out.processes.append(Process(path.name, scripts, elsewhere))
        if measure:  # (the whole file parsed only when a changed file's blocks are wanted)
            for script in _scripts(data):
                found = script_path(str(script.get("url", "")))
                rel = files.relative(found) if found else None
                if rel in lines_wanted and isinstance(script.get("functions"), list):
                    out.functions.setdefault(rel, []).append(script["functions"])
    return out


def _scripts(data: bytes) -> list[dict[str, Any]]:
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError):  # (a record nested to break the parser)
        return []
    result = raw.get("result") if isinstance(raw, dict) else None
    return [s for s in result if isinstance(s, dict)] if isinstance(result, list) else []


# --- changed lines that ran ---


def executed_lines(text: str, runs: Iterable[list[dict[str, Any]]], wanted: Iterable[int]) -> set[int] | None:
    """Which of `wanted` (1-based lines of `text`) ran in any of `runs` (one script's functions, per process);
    None when the script V8 ran is not this text (transformed code)."""
    units = _utf16_offsets(text)
    ranges: list[tuple[int, int, int]] = []
    for functions in runs:
        spans: list[tuple[int, int, int]] = []
        for f in functions:
            for r in (f.get("ranges") or []) if isinstance(f, dict) else []:
                a, b, c = (r.get(k) for k in ("startOffset", "endOffset", "count")) if isinstance(r, dict) else [None] * 3
                if isinstance(a, int) and isinstance(b, int) and isinstance(c, int):
                    spans.append((a, b, c))
        top = [b for a, b, _ in spans if a == 0]
        if not top or max(top) != units[-1]:
            return None
        ranges += spans
    starts = _line_starts(text)
    ran = set()
    for line in wanted:
        if not 1 <= line <= len(starts):
            continue
        begin = starts[line - 1]
        end = starts[line] if line < len(starts) else len(text)
        body = text[begin:end]
        first = begin + (len(body) - len(body.lstrip()))
        if first >= end:
            continue
        at = units[first]
        holding = [(b - a, c) for a, b, c in ranges if a <= at < b]
        if holding and min(holding)[1] > 0:
            ran.add(line)
    return ran


def _utf16_offsets(text: str) -> list[int]:
    """V8 counts offsets in UTF-16 code units: each character's offset, and the text's length last."""
    offsets, at = [], 0
    for ch in text:
        offsets.append(at)
        at += 2 if ord(ch) > 0xFFFF else 1
    offsets.append(at)
    return offsets


def _line_starts(text: str) -> list[int]:
    starts, at = [0], 0
    for line in text.splitlines(keepends=True)[:-1]:
        at += len(line)
        starts.append(at)
    return starts


# --- builds ---


@dataclass
class Builds:
    """The builds a command ran, held against the changed files it did not run from the tree."""

    files: TreeFiles
    builds: set[str]
    binds: Mapping[Path, Path]  # a bound folder's place in the tree -> the host folder (setup's caches)
    _sources: dict[str, set[str]] = field(default_factory=dict)

    def host(self, rel: str) -> Path:
        """Where the worker finds a file of the tree's root (a bound folder is not in the tree on the host)."""
        path = self.files.root / rel
        for dest, host in self.binds.items():
            if dest == path or dest in path.parents:
                return host / path.relative_to(dest)
        return path

    def sources(self, build: str) -> set[str]:
        """The tree files a build's source map names."""
        if build not in self._sources:
            self._sources[build] = self._read_map(build)
        return self._sources[build]

    def _read_map(self, build: str) -> set[str]:
        path = self.host(build)
        data = read_capped(Path(str(path) + ".map"), MAP_MAX_BYTES)
        if data is None:
            whole = read_capped(path, 64 * 1024 * 1024)
            found = _INLINE.search(whole[-INLINE_MAP_TAIL:]) if whole else None
            try:
                data = base64.b64decode(found.group(1)) if found else None
            except ValueError:
                data = None
        try:
            raw = json.loads(data) if data else None
        except (ValueError, RecursionError):  # (a record nested to break the parser)
            return set()
        if not isinstance(raw, dict) or not isinstance(raw.get("sources"), list):
            return set()
        given = raw.get("sourceRoot")
        root = given if isinstance(given, str) else ""
        folder = os.path.dirname(str(self.files.root / build))
        named = set()
        for source in raw["sources"][:100_000]:
            if not isinstance(source, str):
                continue
            source = re.sub(r"^webpack://[^/]*/", "", root + source)
            named_path = script_path(source) if source.startswith(("file://", "/")) else os.path.join(folder, source)
            rel = self.files.relative(os.path.normpath(named_path)) if named_path else None
            if rel is not None:
                named.add(rel)
        return named

    def package(self, rel: str) -> str:
        """The folder of the nearest package.json above `rel` ("" the tree's top)."""
        parts = rel.split("/")[:-1]
        while parts:
            if self.files.own("/".join([*parts, "package.json"])):
                return "/".join(parts)
            parts.pop()
        return ""

    def stem(self, rel: str, folders: tuple[str, ...]) -> str:
        package = self.package(rel)
        inner = rel[len(package) + 1:] if package else rel
        parts = inner.split("/")
        if len(parts) > 1 and parts[0] in folders:
            parts = parts[1:]
        name = re.sub(r"(\.min)?\.(c|m)?(j|t)sx?$", "", parts[-1])
        return "/".join([*parts[:-1], name])

    def of(self, source: str) -> list[str]:
        """The builds that hold `source`: by source map, else by path, else by package (its build folders: a
        script a tool wrote beside its config, tsup's `tsup.config.bundled_*.mjs`, builds none of its sources)."""
        ordered = sorted(self.builds)
        mapped = [b for b in ordered if source in self.sources(b)]
        if mapped:
            return mapped
        stem, package = self.stem(source, SOURCE_FOLDERS), self.package(source)
        same = [b for b in ordered if self.package(b) == package and self.in_build_folder(b, package)]
        return [b for b in same if self.stem(b, BUILD_FOLDERS) == stem] or same

    @staticmethod
    def in_build_folder(build: str, package: str) -> bool:
        inner = build[len(package) + 1:] if package else build
        return inner.split("/")[0] in BUILD_FOLDERS

    def judge(self, source: str) -> tuple[str, str] | None:
        """("outside", words) when a build of `source` older than it ran (another copy of its code ran, whatever
        else did); ("inside", build) when only builds made after it was written ran; None when no build of it ran."""
        found = self.of(source)
        if not found:
            return None
        written = mtime(self.files.root / source)
        # (a build gone by the end of the check was made and removed by it: a temporary file, never a stale one)
        stale = [b for b in found if written is not None and (made := mtime(self.host(b))) is not None
                 and made < written]
        if stale:
            return "outside", f"{stale[0]} (a build older than {source}: not made from this tree)"
        return "inside", found[0]

"""Which files a JavaScript runner collects as its tests, by its own rules as the tree configures them (read as data,
never run: jsconfig.py): an affected-test selection hands a runner only files it would run itself.

- jest: `testMatch` (default `**/__tests__/**/*.?([mc])[jt]s?(x)` and `**/?(*.)+(spec|test).?([mc])[jt]s?(x)`) or
  `testRegex`, against the file's absolute path; `testPathIgnorePatterns` (default `/node_modules/`); under one of
  `roots` (default `<rootDir>`); an extension of `moduleFileExtensions`. From `--config` (a file or JSON), else the
  first jest.config.* or package.json found from the runner's folder up (its `jest` key), as jest looks.
- vitest: `test.include` (default `**/*.{test,spec}.?(c|m)[jt]s?(x)`) less `test.exclude` (node_modules, dist,
  cypress, dot folders, tools' config files), relative to `test.dir` (default the root); with `--typecheck` (or
  `typecheck.enabled`) `typecheck.include` too (default `**/*.{test,spec}-d.?(c|m)[jt]s?(x)`). From `--config`,
  else vitest.config.* or vite.config.* in the runner's folder.
- node --test: its default patterns (`**/*.test.?(c|m)js`, `**/test/**/*.?(c|m)js`...), or a file the command
  names.

A setting reposwarm cannot read (a variable, a call, a spread of another config, `projects`, a preset that is not
ts-jest's, a workspace file, a command-line override of them) leaves `matches` None with why: an affected
selection then runs the command whole, and a lane's named tests are taken as named.
"""

from __future__ import annotations

import functools
import json
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reposwarm.checks.runners import jsconfig, jsglobs, prefixes
from reposwarm.checks.runners.jsconfig import UNKNOWN, Spread

MAX_CONFIG = jsconfig.MAX_TEXT


@dataclass(frozen=True)
class Collection:
    matches: Callable[[str], bool] | None  # a path, relative to the runner's folder: one of its test files?
    why: str = ""  # matches None: why reposwarm cannot tell
    source: str = ""  # where the rules came from


def _unsure(why: str) -> Collection:
    return Collection(None, why)


class _Unsure(Exception):
    pass


def _read(path: Path) -> str:
    try:
        if path.is_symlink() or path.stat().st_size > MAX_CONFIG:
            raise _Unsure(f"{path.name} is a symlink or too large to read")
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise _Unsure(f"{path.name} cannot be read ({err.strerror})") from None


def _in_tree(root: Path, rel: str) -> str:
    norm = posixpath.normpath(rel)
    if norm.startswith("../") or norm == ".." or posixpath.isabs(norm):
        raise _Unsure(f"its configuration {rel!r} is outside the tree")
    return norm


def _strings(value: Any, what: str, defaults: dict[str, list[str]] | None = None) -> list[str]:
    """A setting that is a string or a list of strings (with vitest's default spreads), or _Unsure."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        out: list[str] = []
        for item in value:
            if isinstance(item, Spread) and defaults is not None and item.name in defaults:
                out += defaults[item.name]
            elif isinstance(item, str):
                out.append(item)
            else:
                raise _Unsure(f"its {what} is not a list of strings reposwarm can read")
        return out
    raise _Unsure(f"its {what} is set to a value reposwarm cannot read (a variable, a call)")


def _one(found: jsconfig.Found, path: tuple[str, ...], key: str) -> Any:
    """The single literal value of `key` at `path`, None when unset; _Unsure when set more than once or not as a
    literal (a condition may pick either)."""
    values = found.at(path, key)
    if len(values) > 1:
        raise _Unsure(f"it sets {key} more than once")
    if values and values[0] is UNKNOWN:
        raise _Unsure(f"its {key} is set to a value reposwarm cannot read (a variable, a call)")
    return values[0] if values else None


@functools.lru_cache(maxsize=64)
def _parsed(text: str, keys: frozenset[str]) -> jsconfig.Found:
    """A configuration file's text read once (a plan asks for the same command's rules several times)."""
    return jsconfig.read(text, set(keys))


def _config_file(root: Path, rel: str, keys: set[str]) -> tuple[jsconfig.Found | dict[str, Any], str]:
    text = _read(root / rel)
    if rel.endswith(".json"):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise _Unsure(f"{rel} is not JSON") from None
        if not isinstance(data, dict):
            raise _Unsure(f"{rel} holds no settings object")
        return data, rel
    found = _parsed(text, frozenset(keys))
    if found.opaque:
        raise _Unsure(f"{rel}: {found.opaque}")
    return found, rel


# --- jest ---------------------------------------------------------------------------------------------------------

JEST_MATCH = ["**/__tests__/**/*.?([mc])[jt]s?(x)", "**/?(*.)+(spec|test).?([mc])[jt]s?(x)"]
JEST_EXTENSIONS = ["js", "mjs", "cjs", "jsx", "ts", "mts", "cts", "tsx", "json", "node"]
_JEST_KEYS = {"rootDir", "roots", "testMatch", "testRegex", "testPathIgnorePatterns", "moduleFileExtensions",
              "projects", "preset"}
_JEST_CLI = ("--testMatch", "--testRegex", "--testPathIgnorePatterns", "--roots", "--rootDir", "--projects",
             "--selectProjects", "--moduleFileExtensions", "--preset")
_JEST_FILES = [f"jest.config.{ext}" for ext in ("js", "ts", "mjs", "cjs", "mts", "cts", "json")]


def _jest_settings(root: Path, wd: str, args: list[str]) -> tuple[dict[str, Any], str, str]:
    """(settings, the folder they are relative to, where they came from)."""
    given = prefixes.option_value(args, ("-c", "--config"))
    if given is not None:
        if given.lstrip().startswith("{"):
            try:
                data = json.loads(given)
            except (ValueError, RecursionError):
                raise _Unsure("its --config is JSON reposwarm cannot read") from None
            return (data if isinstance(data, dict) else {}), wd, "--config"
        rel = _in_tree(root, posixpath.join(wd, given))
        return _jest_from(root, rel), posixpath.dirname(rel) or ".", rel
    folder = wd
    while True:
        for name in _JEST_FILES:
            rel = posixpath.normpath(posixpath.join(folder, name))
            if (root / rel).is_file():
                return _jest_from(root, rel), folder, rel
        package = posixpath.normpath(posixpath.join(folder, "package.json"))
        if (root / package).is_file():
            try:
                data = json.loads(_read(root / package))
            except (ValueError, RecursionError):
                raise _Unsure(f"{package} is not JSON") from None
            settings = data.get("jest") if isinstance(data, dict) else None
            if settings is not None and not isinstance(settings, dict):
                raise _Unsure(f"{package}'s jest key is not a settings object")
            return settings or {}, folder, f"{package}'s jest key" if settings else "jest's defaults"
        if folder in (".", ""):
            return {}, wd, "jest's defaults"
        folder = posixpath.dirname(folder) or "."


def _jest_from(root: Path, rel: str) -> dict[str, Any]:
    data, _ = _config_file(root, rel, _JEST_KEYS)
    if isinstance(data, dict):
        return data
    return {key: v for key in _JEST_KEYS if (v := _one(data, ("",), key)) is not None}


def _jest(view: prefixes.View, root: Path, wd: str) -> Collection:
    args = view.args
    if cli := next((a.partition("=")[0] for a in args if a.partition("=")[0] in _JEST_CLI), None):
        raise _Unsure(f"its command line sets {cli}")
    settings, base, source = _jest_settings(root, wd, args)
    if settings.get("projects") is not None:
        raise _Unsure(f"{source} sets projects")
    preset = settings.get("preset")
    if preset is not None and not (isinstance(preset, str) and preset.startswith("ts-jest")):
        raise _Unsure(f"{source} uses the preset {str(preset)[:60]!r}, which may set what jest collects")
    top = Path(os.path.normpath(root.resolve() / base))
    given_root = settings.get("rootDir")
    if given_root is not None and not isinstance(given_root, str):
        raise _Unsure(f"{source}'s rootDir is no path")
    root_dir = str(Path(os.path.normpath(top / given_root)) if given_root else top)

    def here(text: str) -> str:
        return text.replace("<rootDir>", root_dir)

    roots = [os.path.normpath(here(r) if os.path.isabs(here(r)) else os.path.join(root_dir, here(r)))
             for r in _strings(settings.get("roots", ["<rootDir>"]), "roots")]
    regex = settings.get("testRegex")
    regexes = [jsglobs.js_regex(r) for r in _strings(regex, "testRegex")] if regex not in (None, "", []) else []
    globs = [] if regexes else [(g.startswith("!"), jsglobs.glob(here(g.lstrip("!"))))
                                for g in _strings(settings.get("testMatch", JEST_MATCH), "testMatch")]
    ignored = [jsglobs.js_regex(here(p)) for p in
               _strings(settings.get("testPathIgnorePatterns", ["/node_modules/"]), "testPathIgnorePatterns")]
    extensions = set(_strings(settings.get("moduleFileExtensions", JEST_EXTENSIONS), "moduleFileExtensions"))
    runner_dir = Path(os.path.normpath(root.resolve() / wd))

    def matches(path: str) -> bool:
        full = os.path.normpath(runner_dir / path)
        if posixpath.splitext(full)[1].lstrip(".") not in extensions:
            return False
        if not any(full == r or full.startswith(r.rstrip("/") + "/") for r in roots):
            return False
        if regexes:
            collected = any(r.search(full) for r in regexes)
        else:
            collected = _jest_globs(globs, full)
        return collected and not any(p.search(full) for p in ignored)

    return Collection(matches, source=source)


def _jest_globs(globs: list[tuple[bool, Any]], path: str) -> bool:
    """jest-util's globsToMatcher: in order, a positive glob that matches keeps the file, a negated one that
    matches drops it; with only negated globs, a file none drops is kept."""
    kept: bool | None = None
    for negated, pattern in globs:
        matched = pattern.match(path) is not None
        if negated and matched:
            kept = False
        elif matched and not negated:
            kept = True
    return kept is not False if all(n for n, _ in globs) else bool(kept)


# --- vitest -------------------------------------------------------------------------------------------------------

VITEST_INCLUDE = ["**/*.{test,spec}.?(c|m)[jt]s?(x)"]
VITEST_EXCLUDE = ["**/node_modules/**", "**/dist/**", "**/cypress/**", "**/.{idea,git,cache,output,temp}/**",
                  "**/{karma,rollup,webpack,vite,vitest,jest,ava,babel,nyc,cypress,tsup,build,eslint,prettier}"
                  ".config.*"]
VITEST_TYPECHECK = ["**/*.{test,spec}-d.?(c|m)[jt]s?(x)"]
_VITEST_DEFAULTS = {"configDefaults.exclude": VITEST_EXCLUDE, "defaultExclude": VITEST_EXCLUDE,
                    "configDefaults.include": VITEST_INCLUDE, "defaultInclude": VITEST_INCLUDE,
                    "configDefaults.typecheck.include": VITEST_TYPECHECK,
                    "configDefaults.typecheck.exclude": VITEST_EXCLUDE}
_VITEST_KEYS = {"test", "include", "exclude", "dir", "root", "typecheck", "enabled", "only", "workspace",
                "projects"}
_VITEST_CLI = ("--root", "-r", "--project", "--workspace", "--browser", "--dir")
_VITEST_FILES = [f"{stem}.config.{ext}" for stem in ("vitest", "vite")
                 for ext in ("ts", "mts", "cts", "js", "mjs", "cjs")]
_WORKSPACES = [f"vitest.{kind}.{ext}" for kind in ("workspace", "projects")
               for ext in ("ts", "mts", "cts", "js", "mjs", "cjs", "json")]


def _flag(args: list[str], name: str) -> bool | None:
    """A boolean option as vitest's parser takes it (`--x`, `--x=false`, `--no-x`); None when absent."""
    for a in args:
        if a == "--":
            break
        key, eq, value = a.partition("=")
        if key == name:
            return value.lower() not in ("false", "0") if eq else True
        if key == "--no-" + name[2:]:
            return False
    return None


def _vitest(view: prefixes.View, root: Path, wd: str) -> Collection:
    args = view.args
    if cli := next((a.partition("=")[0] for a in args if a.partition("=")[0] in _VITEST_CLI), None):
        raise _Unsure(f"its command line sets {cli}")
    if workspace := next((n for n in _WORKSPACES if (root / wd / n).is_file()), None):
        raise _Unsure(f"{workspace} defines projects")
    given = prefixes.option_value(args, ("-c", "--config"))
    rel = _in_tree(root, posixpath.join(wd, given)) if given is not None else \
        next((posixpath.normpath(posixpath.join(wd, n)) for n in _VITEST_FILES if (root / wd / n).is_file()), None)
    found = jsconfig.Found()
    source = "vitest's defaults"
    if rel is not None:
        data, source = _config_file(root, rel, _VITEST_KEYS)
        if isinstance(data, dict):
            raise _Unsure(f"{rel} is a JSON file vitest does not read as its configuration")
        found = data
    test = ("", "test")
    for key in ("workspace", "projects"):
        if found.at(test, key):
            raise _Unsure(f"{source} sets test.{key}")
    if found.at(("",), "root"):
        raise _Unsure(f"{source} sets root")
    include = _strings(_one(found, test, "include") or VITEST_INCLUDE, "test.include", _VITEST_DEFAULTS)
    exclude = _strings(_one(found, test, "exclude") or VITEST_EXCLUDE, "test.exclude", _VITEST_DEFAULTS)
    exclude += [p for i, a in enumerate(args) if a.partition("=")[0] == "--exclude"
                for p in [a.partition("=")[2] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")] if p]
    folder = _one(found, test, "dir")
    if folder is not None and not isinstance(folder, str):
        raise _Unsure(f"{source}'s test.dir is no path")
    check = ("", "test", "typecheck")
    enabled = _flag(args, "--typecheck")
    enabled = _flag(args, "--typecheck.enabled") if enabled is None else enabled
    enabled = _one(found, check, "enabled") is True if enabled is None else enabled
    only = bool(_flag(args, "--typecheck.only")) or _one(found, check, "only") is True
    typed = _strings(_one(found, check, "include") or VITEST_TYPECHECK, "typecheck.include", _VITEST_DEFAULTS) \
        if enabled or only else []
    typed_exclude = _strings(_one(found, check, "exclude") or exclude, "typecheck.exclude", _VITEST_DEFAULTS)
    runs = [jsglobs.glob(_relative_glob(g)) for g in ([] if only else include)]
    checks = [jsglobs.glob(_relative_glob(g)) for g in typed]
    skip = [jsglobs.glob(_relative_glob(g)) for g in exclude]
    skip_typed = [jsglobs.glob(_relative_glob(g)) for g in typed_exclude]
    base = posixpath.normpath(folder) if folder else "."
    if base.startswith("../") or posixpath.isabs(base):
        raise _Unsure(f"{source}'s test.dir is outside the runner's folder")

    def matches(path: str) -> bool:
        rel = posixpath.normpath(path)
        if base != ".":
            if not rel.startswith(base + "/"):
                return False
            rel = rel[len(base) + 1:]
        if any(g.match(rel) for g in runs) and not any(g.match(rel) for g in skip):
            return True
        return any(g.match(rel) for g in checks) and not any(g.match(rel) for g in skip_typed)

    return Collection(matches, source=source)


def _relative_glob(pattern: str) -> str:
    return pattern[2:] if pattern.startswith("./") else pattern


# --- node --test --------------------------------------------------------------------------------------------------

NODE_PATTERNS = ["**/*.test.?(c|m)[jt]s", "**/*-test.?(c|m)[jt]s", "**/*_test.?(c|m)[jt]s", "**/test-*.?(c|m)[jt]s",
                 "**/test.?(c|m)[jt]s", "**/test/**/*.?(c|m)[jt]s"]


def _node(view: prefixes.View, root: Path, wd: str) -> Collection:
    named = {posixpath.normpath(a) for a in view.args if not a.startswith("-")}
    patterns = [jsglobs.glob(p) for p in NODE_PATTERNS]

    def matches(path: str) -> bool:
        rel = posixpath.normpath(path)
        if rel in named:
            return True
        return "node_modules" not in rel.split("/") and any(p.match(rel) for p in patterns)

    return Collection(matches, source="node --test's default patterns")


_BY_RUNNER: dict[str, Callable[[prefixes.View, Path, str], Collection]] = {
    "jest": _jest, "vitest": _vitest, "node": _node}


def collection(view: prefixes.View, root: Path) -> Collection:
    """The runner's rules for its test files, in the tree `root`; `matches` None (with why) when reposwarm cannot
    read them, or knows no rules for this runner."""
    make = _BY_RUNNER.get(view.runner)
    if make is None or view.workdir is None:
        return _unsure(f"reposwarm does not read {view.runner or 'this command'}'s test file rules")
    try:
        return make(view, root, view.workdir)
    except (_Unsure, jsglobs.Unreadable) as err:
        return _unsure(f"{view.runner}: {err}")
    except Exception as err:  # noqa: BLE001 - the tree's files are hostile input: unread, never a crash
        return _unsure(f"{view.runner}: its configuration could not be read ({type(err).__name__})")

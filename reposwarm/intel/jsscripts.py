"""A package.json test script read as what it runs, step by step: the test runner's own command (vitest, jest,
mocha, node --test, bun test), and what else it runs before or after it (lint, a typecheck, a build), through
`&&` and `;` chains, `npm run X` / `pnpm X` / `yarn X` indirections (with their pre- and post-scripts),
`run-s` / `npm-run-all` sequences, `NAME=value` and cross-env settings, coverage wrappers (c8, nyc) and watch
modes.

Why: `npm test` is usually more than the runner (`pnpm lint && vitest run --typecheck`), and reposwarm judges a
check per test only when it runs the runner itself; a lint failure inside the same command would also make the
tests' verdict unreadable. So the runner is taken out, and the rest is said, step by step, for javascript.py to
keep (a build the tests need) or offer (lint, typecheck). Only the script's text is read: nothing runs here.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace

from reposwarm.checks.runners.prefixes import base
from reposwarm.checks.runners.prefixes import look as look_runner
from reposwarm.checks.runners.scripts import invocation, shell_parts, shell_words

RUNNERS = ("vitest", "jest", "mocha", "_mocha")
# what a step is, by its program: checks of the code that are not tests, and builds the tests may need first
LINTERS = frozenset({"eslint", "eslint_d", "prettier", "biome", "oxlint", "stylelint", "xo", "standard", "publint",
                     "attw", "knip", "markdownlint", "markdownlint-cli2", "dprint", "cspell", "lint-staged",
                     "sort-package-json", "madge", "depcheck", "size-limit", "are-the-types-wrong", "syncpack",
                     "commitlint", "remark", "textlint", "ts-standard", "rome", "tslint", "jshint", "semistandard"})
TYPECHECKERS = frozenset({"vue-tsc", "tsd", "tsc-files", "svelte-check", "type-coverage"})
BUILDERS = frozenset({"unbuild", "tsup", "tsdown", "rollup", "webpack", "esbuild", "babel", "swc", "parcel",
                      "microbundle", "ncc", "bunchee", "pkgroll", "obuild", "rimraf", "del-cli", "shx", "mkdirp",
                      "copyfiles", "cpy", "lerna-build", "gulp", "grunt", "nodemon", "automd", "tsc-alias"})
WORKSPACE_TOOLS = frozenset({"lerna", "turbo", "nx", "wsrun", "ultra", "rush", "moon", "bolt"})
SEQUENCERS = frozenset({"run-s", "run-p", "npm-run-all", "npm-run-all2"})
COVERAGE = frozenset({"c8", "nyc"})
EXEC_PREFIXES = {"npx": 1, "bunx": 1}  # `npx vitest`: the program after them (their own options skipped)
# the managers' options that run a script in other packages (the workspace's members) rather than this one
RECURSIVE = {"npm": frozenset({"--workspaces", "-ws", "--workspace", "-w"}),
             "pnpm": frozenset({"-r", "--recursive", "--filter", "-F", "--filter-prod"}),
             "yarn": frozenset()}
# what a script is by its name, where its program does not say (`"lint": "node scripts/lint.js"`)
NAMED = ((re.compile(r"(^|:)(lint|eslint|prettier|format|fmt|style|stylelint|spell|cspell|biome|check-format)(:|$)"),
          "lint"),
         (re.compile(r"(^|:)(typecheck|type-check|types|check-types|typings|tsc|ts-check|check:types)(:|$)"),
          "typecheck"),
         (re.compile(r"(^|:)(build|compile|bundle|prepare|pretest|generate|codegen)(:|$)"), "build"))
MAX_DEPTH = 6  # scripts that run scripts...
MAX_STEPS = 40
NO_TEST = re.compile(r"no test specified")  # `npm init`'s placeholder: no tests
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WATCH = {"vitest": ("--watch", "-w"), "jest": ("--watch", "--watchAll"), "mocha": ("--watch", "-w"),
          "node": ("--watch",)}

RUNNER, LINT, TYPECHECK, BUILD, WORKSPACES, OTHER = "runner", "lint", "typecheck", "build", "workspaces", "other"


@dataclass(frozen=True)
class Step:
    """One command the test script runs, in order."""

    kind: str  # RUNNER, LINT, TYPECHECK, BUILD, WORKSPACES or OTHER
    words: tuple[str, ...]  # the program and its arguments (a runner's in the form that runs once: vitest run)
    settings: tuple[str, ...] = ()  # the NAME=value settings it runs with (its own, and cross-env's)
    runner: str = ""  # vitest, jest, mocha, node (node --test), bun (bun test)
    script: tuple[str, ...] = ()  # the script (and what it passes on) that runs this step alone, where one does
    text: str = ""  # as the script wrote it
    said: str = ""  # what was changed from the script (a watch mode left out, a coverage wrapper dropped), or why
    # a step could not be read

    @property
    def gates(self) -> bool:
        """Whether the check can judge this step per test."""
        return self.kind == RUNNER


def test_script(package: Mapping[str, object] | None, name: str = "test") -> str | None:
    """The package's test script, unless it is none or `npm init`'s placeholder."""
    scripts = package.get("scripts") if isinstance(package, Mapping) else None
    script = scripts.get(name) if isinstance(scripts, Mapping) else None
    if not isinstance(script, str) or not script.strip() or NO_TEST.search(script):
        return None
    return script.strip()


def read_script(scripts: Mapping[str, object], name: str = "test") -> list[Step]:
    """The steps the script `name` runs, in order (its pre- and post-scripts included)."""
    clean = {k: v for k, v in scripts.items() if isinstance(k, str) and isinstance(v, str)}
    return _Reader(clean).script(name, [], 0, ())[:MAX_STEPS]


class _Reader:
    def __init__(self, scripts: dict[str, str]) -> None:
        self.scripts = scripts

    def script(self, name: str, passed: list[str], depth: int, chain: tuple[str, ...]) -> list[Step]:
        text = self.scripts.get(name, "")
        if name in chain or depth > MAX_DEPTH:
            return [Step(OTHER, (), text=text, said=f"the `{name}` script runs itself, or scripts too deep")]
        steps: list[Step] = []
        for hook, args in ((f"pre{name}", []), (name, passed), (f"post{name}", [])):
            if hook not in self.scripts:
                continue
            parts = shell_parts(self.scripts[hook])
            if args and parts:  # npm passes the arguments after `--` on to the script's last command
                parts[-1] = parts[-1] + " " + " ".join(shlex.quote(a) for a in args)
            for part in parts:
                steps += self.part(part, depth, (*chain, name))
        return steps

    def run(self, name: str, passed: list[str], depth: int, chain: tuple[str, ...]) -> list[Step]:
        """A script run from another: its steps, each named by the outermost script that runs only non-tests."""
        steps = self.script(name, passed, depth + 1, chain)
        if not any(s.kind in (RUNNER, WORKSPACES) for s in steps):
            named = next((kind for pattern, kind in NAMED if pattern.search(name)), None)
            steps = [replace(s, script=(name, *passed), kind=named if named and s.kind == OTHER else s.kind)
                     for s in steps]
        return steps

    def part(self, text: str, depth: int, chain: tuple[str, ...]) -> list[Step]:
        words = _words(text)
        if isinstance(words, str):
            return [Step(OTHER, (), text=text, said=f"a shell `{words.strip() or 'newline'}` reposwarm does not read")]
        settings: list[str] = []
        while words and (_ASSIGN.match(words[0]) or words[0] == "cross-env"):
            if words[0] != "cross-env":
                settings.append(words[0])
            words = words[1:]
        if not words:
            return []
        program = base(words[0])
        if program == "cross-env-shell":
            return [Step(OTHER, tuple(words), tuple(settings), text=text, said="cross-env-shell runs a shell")]
        if program in ("npm", "pnpm", "yarn"):
            return self.manager(words, tuple(settings), text, depth, chain)
        if program == "bun" and len(words) > 1 and words[1] != "test":  # `bun run lint`, `bun lint`: a script
            at = 2 if words[1] == "run" else 1
            if at < len(words) and words[at] in self.scripts:
                return self.run(words[at], words[at + 1:], depth, chain)
        if program in SEQUENCERS:
            return self.sequence(words, text, depth, chain)
        if program in WORKSPACE_TOOLS:
            return [Step(WORKSPACES, tuple(words), tuple(settings), text=text)]
        return [program_step(words, tuple(settings), text)]

    def manager(self, words: list[str], settings: tuple[str, ...], text: str, depth: int,
                chain: tuple[str, ...]) -> list[Step]:
        program = base(words[0])
        options = words[1:words.index("--")] if "--" in words else words[1:]
        if (program == "yarn" and words[1:2] in (["workspaces"], ["workspace"])) or any(
                o.partition("=")[0] in RECURSIVE[program] for o in options if o.startswith("-")):
            return [Step(WORKSPACES, tuple(words), settings, text=text)]
        if words[1:2] == ["exec"] or (program == "npm" and words[1:2] == ["x"]):
            rest = words[2:]
            rest = rest[1:] if rest[:1] == ["--"] else rest
            return [program_step(rest, settings, text)] if rest else []
        found = invocation(words)
        if isinstance(found, str):
            return [Step(WORKSPACES, tuple(words), settings, text=text)]
        if found is None:
            return [Step(OTHER, tuple(words), settings, text=text)]
        name, passed, strict = found
        if name in self.scripts:
            steps = self.run(name, passed, depth, chain)
            return [replace(s, settings=(*settings, *s.settings)) for s in steps]
        if strict:
            return [Step(OTHER, tuple(words), settings, text=text, said=f"package.json has no `{name}` script")]
        at = words.index(name)  # `pnpm vitest run`, `yarn jest`: the package's own binary
        return [program_step(words[at:], settings, text)]

    def sequence(self, words: list[str], text: str, depth: int, chain: tuple[str, ...]) -> list[Step]:
        """`run-s lint test:*`, `npm-run-all -s build test`: the scripts it names (`:`-separated globs)."""
        steps: list[Step] = []
        for word in words[1:]:
            if word.startswith("-"):
                continue
            names = [n for n in self.scripts if _script_glob(word, n)] if any(c in word for c in "*?") else [word]
            for name in names:
                if name not in self.scripts:
                    return [Step(OTHER, tuple(words), text=text, said=f"package.json has no `{name}` script")]
                steps += self.run(name, [], depth, chain)
        return steps


_GLOB = {"*": "\x01", "?": "\x02", "[": "\x03", "]": "\x04"}


def _words(text: str) -> list[str] | str:
    """A command's words; a glob is taken as a word (`mocha test/**/*.js`, `run-s test:*`): the runners and
    run-s match it themselves, as they do when no file matches it."""
    if any(c in text for c in "\x01\x02\x03\x04"):
        return "a control character"
    words = shell_words("".join(_GLOB.get(c, c) for c in text))
    back = {v: k for k, v in _GLOB.items()}
    return words if isinstance(words, str) else ["".join(back.get(c, c) for c in w) for w in words]


def _script_glob(pattern: str, name: str) -> bool:
    """npm-run-all's globs: `*` within one `:`-separated part, `**` across them."""
    if "**" in pattern:
        return fnmatch.fnmatchcase(name, pattern.replace("**", "*"))
    return len(pattern.split(":")) == len(name.split(":")) and all(
        fnmatch.fnmatchcase(n, p) for p, n in zip(pattern.split(":"), name.split(":"), strict=True))


def program_step(words: list[str], settings: tuple[str, ...], text: str) -> Step:
    """What one program of a script is: a test runner (in its once-through form), lint, a typecheck, a build."""
    said = ""
    while words and base(words[0]) in EXEC_PREFIXES:  # `npx vitest`: the package's own binary
        i = 1
        while i < len(words) and words[i].startswith("-"):
            i += 2 if words[i] in ("-p", "--package") else 1
        words = words[i:]
    if words and base(words[0]) in COVERAGE:  # `c8 vitest run`: the runner runs alone (coverage is not a test)
        inner = next((i for i, w in enumerate(words) if i and (base(w) in (*RUNNERS, "node", "bun", "npx")
                                                             or base(w) in ("npm", "pnpm", "yarn"))), None)
        if inner is not None:
            said = f"without {base(words[0])} (its coverage report is not a test)"
            words = words[inner:]
            if base(words[0]) in ("npx", "npm", "pnpm", "yarn"):
                step = program_step(words[2:] if words[1:2] == ["exec"] else words[1:], settings, text)
                return replace(step, said=", ".join(filter(None, [said, step.said])))
    if not words:
        return Step(OTHER, (), settings, text=text)
    program = base(words[0])
    name = {"_mocha": "mocha"}.get(program, program)
    if name in RUNNERS or name == "mocha":
        if name == "vitest" and words[1:2] == ["bench"]:  # benchmarks, not tests
            return Step(OTHER, tuple(words), settings, text=text, said=said)
        if name == "vitest" and (words[1:2] == ["typecheck"] or any(w.startswith("--typecheck.only") for w in words)):
            return Step(TYPECHECK, tuple(words), settings, text=text, said=said)
        args, changed = _once(name, words[1:])
        return Step(RUNNER, (words[0], *args), settings, runner=name, text=text,
                    said=", ".join(filter(None, [said, changed])))
    if program == "bun" and words[1:2] == ["test"]:
        return Step(RUNNER, tuple(words), settings, runner="bun", text=text, said=said)
    if program in ("node", "nodejs"):
        view = look_runner(list(words), None)
        if view.runner == "node":
            args, changed = _once("node", words[1:])
            return Step(RUNNER, (words[0], *args), settings, runner="node", text=text,
                        said=", ".join(filter(None, [said, changed])))
        if view.runner:
            return Step(RUNNER, tuple(words), settings, runner=view.runner, text=text, said=said)
        return Step(OTHER, tuple(words), settings, text=text, said=said)
    if program in ("tsc", "vue-tsc"):
        emits = not any(w in ("--noEmit", "-noEmit", "--noEmit=true") for w in words) and program == "tsc"
        return Step(BUILD if emits else TYPECHECK, tuple(words), settings, text=text)
    if program == "vite" and words[1:2] == ["build"]:
        return Step(BUILD, tuple(words), settings, text=text)
    kind = LINT if program in LINTERS else TYPECHECK if program in TYPECHECKERS else \
        BUILD if program in BUILDERS else OTHER
    return Step(kind, tuple(words), settings, text=text, said=said)


def _once(runner: str, args: list[str]) -> tuple[list[str], str]:
    """A runner's arguments in the form that runs the tests once and ends: vitest's watch mode (`vitest`,
    `vitest watch`, `vitest dev`) as `vitest run`; `--watch` / `--watchAll` left out."""
    watch = _WATCH.get(runner, ())
    kept = [a for a in args if a.partition("=")[0] not in watch]
    changed = "without its watch mode" if len(kept) != len(args) else ""
    if runner == "vitest":
        typed = [a for a in kept if a.partition("=")[0] in ("--typecheck", "--typecheck.enabled")]
        if typed:  # tsc writes its build info into node_modules, which checks bind read-only (the setup's cache)
            kept = [a for a in kept if a not in typed]
            changed = ", ".join(filter(None, [changed, "without its --typecheck (vitest's tsc writes into "
                                                      "node_modules, which checks bind read-only)"]))
        if kept[:1] in (["watch"], ["dev"]):
            return ["run", *kept[1:]], ", ".join(filter(None, ["`vitest " + kept[0] + "` as `vitest run` (once, "
                                                                 "not watching)", changed]))
        if kept[:1] not in (["run"], ["related"]) and "--run" not in kept:
            return ["run", *kept], ", ".join(filter(None, ["`vitest` as `vitest run` (once, not watching)",
                                                           changed]))
    return kept, changed

"""Targeted checks (issue 36): a lane's `run_checks(tests=[...])` runs only the tests it names, each command with its
runner's own selector, and is judged against the same tests of the base commit's full run.

`refusal` says why names are no safe selectors (an option, a path outside the tree, a control character, too
many). `plan` gives, per command of the profile, the invocations that run only the named tests it can select
(`Target`s; a command may need several: go's test names and its packages, cargo's crates), the commands it
skips and why, and the names no command selects. Per runner:

- pytest: files, folders and node ids (`tests/test_x.py::T::test_a`), after `--`, replacing the command's paths;
- unittest: dotted ids (`tests.test_x.T.test_a`) or `.py` files, after `--`;
- node --test: test files or folders, after `--`;
- jest: files with `--runTestsByPath` (no `--`: `yarn jest` (yarn 1) drops every argument before one, reporting
  flags and selection alike; a name is never an option: refusal); `FILE::NAME` adds `--testNamePattern` (the name,
  literally);
- vitest: files as its path filters (vitest reads no `--`), and `FILE::NAME` as jest;
- (node, jest, vitest: only files the runner collects by its own rules, where reposwarm can read them:
  jscollect.py; a helper in a test folder, or vitest's `*.test-d.ts` without --typecheck, is no test of theirs)
- go test: packages (`./pkg/...`) replace the command's; test names (`TestA`, `pkg/path.TestA`,
  `example.com/m/pkg.TestA`) become `-run=^(TestA|TestB)$`, over the command's packages or the named ones;
- cargo test: libtest filters after `--` (substrings of the test's path, `tests::adds`; libtest takes several
  since Rust 1.54, so one invocation runs them all), `CRATE` or `CRATE::FILTER` adding `--package=CRATE`.

Each target knows which of the base commit's tests it selects (`covers`, per name): `narrow` cuts the baseline
down to them, so the tests a targeted run did not select are never lost or missing, while a selected test that
is gone still is. Where a runner's results do not say enough (node names no file for a passing test, cargo no
crate), a base test counts when the targeted run reported it by name.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reposwarm.checks.runners import parsers, prefixes, renumbered
from reposwarm.checks.runners.commands import JUNIT
from reposwarm.checks.runners.parsers import Case
from reposwarm.checks.runners.selectors import SELECT, TAKES, Pred, inside
from reposwarm.contracts.states import ExitClass
from reposwarm.contracts.validation import CommandResult, TestFailure, TestReport

MAX_TESTS = 200
MAX_CHARS = 1000
Loader = Callable[[CommandResult], "list[Case] | None"]


@dataclass(frozen=True)
class Target:
    command: list[str]  # the profile's command, as configured: the baseline knows it by this
    argv: list[str]  # what runs instead: only the selected tests
    runner: str
    names: dict[str, Pred]  # the lane's names it runs, each with the base tests it selects

    def covers(self, case: Case) -> bool | None:
        seen = [pred(case) for pred in self.names.values()]
        return True if True in seen else (None if None in seen else False)


@dataclass(frozen=True)
class Plan:
    targets: list[Target]
    skipped: list[tuple[str, str]]  # (command, why) not run by this targeted run
    unclaimed: list[tuple[str, str]]  # (name, why) no command selects


# --- the names ----------------------------------------------------------------------------------------------------

def refusal(tests: list[str], root: Path) -> str | None:
    """Why these names are not run, in a line for the model; None when each is a plain selector (data only)."""
    if len(tests) > MAX_TESTS:
        return f"run_checks refused: {len(tests)} tests named, at most {MAX_TESTS}: name their files or packages"
    for name in tests:
        why = unsafe(name, root)
        if why:
            shown = repr(name if len(name) <= 80 else name[:80] + "...")
            return (f"run_checks refused: test {shown} {why}; name tests as their runner does (tests/test_x.py::"
                    "test_a, tests.test_x.T.test_a, ./pkg/..., TestName, tests::adds)")
    return None


def unsafe(name: str, root: Path) -> str:
    """Why `name` is no plain selector (an option, a path out of the tree, a control character); "" when it is."""
    if not isinstance(name, str) or not name.strip():
        return "is empty"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return "holds a control character (NUL, newline, tab...)"
    if len(name) > MAX_CHARS:
        return f"is longer than {MAX_CHARS} characters"
    if name.startswith("-"):
        return "is an option, not a test: run_checks takes test names and paths only"
    path = name.partition("::")[0]
    if path.startswith(("/", "~", "\\")):
        return "is an absolute path: name paths inside the repository, from its root"
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../"):
        return "is a path outside the repository"
    if norm.split("/")[0] == ".git":
        return "is in the repository's git folder"
    if not inside(root, root / norm):  # (resolved as far as it exists: a symlink on the way counts)
        return "is a path that leads outside the repository (a symlink)"
    return ""


# --- the plan -----------------------------------------------------------------------------------------------------

def plan(commands: list[list[str]], tests: list[str], root: Path) -> Plan:
    """Per command, what runs only the named tests it can select; the commands skipped, and the names no command
    selects, each with why. `tests`: names `refusal` passed; `root`: the tree the checks run in."""
    names = list(dict.fromkeys(tests))
    targets: list[Target] = []
    skipped: list[tuple[str, str]] = []
    seen: list[str] = []
    for argv in commands:
        command = " ".join(argv)
        view = prefixes.look(argv, root) if argv and not any(JUNIT in a for a in argv) else prefixes.View("")
        if not view.runner:
            why = "it writes its own JUnit report ({junit}): reposwarm does not know how its runner selects tests" \
                if any(JUNIT in a for a in argv) else ("no test runner reposwarm knows" +
                                                      (f" ({view.why})" if view.why else ""))
            skipped.append((command, why))
            continue
        if view.workdir is None:
            skipped.append((command, f"it runs {view.runner} through tox or nox, in a folder reposwarm does not know"))
            continue
        select = SELECT.get(view.runner)
        if select is None:
            skipped.append((command, f"a targeted run does not select {view.runner} tests"))
            continue
        seen.append(view.runner)
        picks = select(view, names, root, view.workdir)
        if isinstance(picks, str) or not picks:
            skipped.append((command, picks if isinstance(picks, str) else "none of the tests named is one it runs"))
            continue
        targets += [Target(argv, [*view.lead, *args], view.runner, chosen) for args, chosen in picks]
    claimed = {n for t in targets for n in t.names}
    takes = "; ".join(f"{r} takes {TAKES[r]}" for r in dict.fromkeys(seen))
    takes = f"{takes}, each among the tests its command runs" if takes else "no command can select tests"
    unclaimed = [(n, f"no command of the profile selects it ({takes})") for n in names if n not in claimed]
    return Plan(targets, skipped, unclaimed)


def described(tests: list[str], ran: int | None) -> str:
    """"targeted: 2 tests of tests/test_x.py": what the verdict line says first."""
    shown = ", ".join(tests[:3]) + (f" and {len(tests) - 3} more" if len(tests) > 3 else "")
    return f"targeted: {ran} test{'' if ran == 1 else 's'} of {shown}" if ran is not None else f"targeted: {shown}"


# --- the judging --------------------------------------------------------------------------------------------------

def narrow(baseline: TestReport, targets: list[Target], results: list[CommandResult],
           cases: Loader) -> tuple[TestReport, Loader]:
    """The baseline a targeted run is judged against, and its case loader: per target, its command's result on the
    base commit, its tests cut down to those the target selects (and those it reported, where its results cannot
    tell), its failures too, under the target's own command line. (`results`: the targets' results, in order.)"""
    by_argv = {tuple(c.argv): c for c in baseline.commands}
    kept: dict[str, list[Case] | None] = {}
    commands: list[CommandResult] = []
    failures: list[TestFailure] = []
    pre_existing: list[TestFailure] = []
    for n, (target, result) in enumerate(zip(targets, results, strict=True)):
        base = by_argv.get(tuple(target.command))
        if base is None:  # (not run on the base: a profile changed between rounds; every failure is new)
            continue
        whole, reported = cases(base), {c.name for c in cases(result) or []}
        chosen = None if whole is None else [
            c for c in whole if (v := target.covers(c)) or (v is None and c.name in reported)]
        names = None if chosen is None else {c.name for c in chosen}
        renamed: dict[str, str] = {}
        if chosen is not None and whole is not None:  # ("X #2" of the whole run is "X" where its file runs alone)
            chosen, renamed = renumbered(chosen, whole)
        ref = f"targeted:{n}"
        kept[ref] = chosen
        commands.append(_narrowed(base, target, chosen, ref))
        old, new = " ".join(target.command), " ".join(target.argv)
        for into, failed in ((failures, baseline.failures), (pre_existing, baseline.pre_existing)):
            # (a failure of the command itself, its exit with no test to blame, is the targeted command's too:
            # named by its line, as the targeted run's own is)
            into += [f.model_copy(update={"command": new, "name": new}) if f.name == old and f.file is None
                     else f.model_copy(update={"command": new, "name": renamed.get(f.name, f.name)}) for f in failed
                     if f.command == old and (names is None or f.name in names or (f.name == old and f.file is None))]
    ran = [c.tests_run for c in commands if c.tests_run is not None]
    narrowed = baseline.model_copy(update={"commands": commands, "failures": failures, "pre_existing": pre_existing,
                                           "tests_run": sum(ran) if ran else None, "flaky": []})
    return narrowed, lambda r: kept[r.cases_ref] if r.cases_ref in kept else cases(r)


def _narrowed(base: CommandResult, target: Target, chosen: list[Case] | None, ref: str) -> CommandResult:
    if chosen is None:
        return base.model_copy(update={"argv": target.argv, "cases_ref": None})
    update: dict[str, object] = {"argv": target.argv, "cases_ref": ref,
                                 "tests_run": len({c.name for c in chosen if c.outcome in parsers.RAN})}
    if base.exit_class == ExitClass.tests_failed and not any(c.outcome in parsers.FAILING for c in chosen):
        update |= {"exit_code": 0, "exit_class": ExitClass.passed, "reason": ""}  # its failures were elsewhere
    return base.model_copy(update=update)


def unmatched(targets: list[Target], results: list[CommandResult], cases: Loader) -> list[str]:
    """The names that matched no test their targets reported (a typo, a test that is gone). A name whose targets'
    results cannot tell (node names no file for a passing test) is taken as matched when its target reported any."""
    found: set[str] = set()
    for target, result in zip(targets, results, strict=True):
        mine = cases(result)
        for name, pred in target.names.items():
            if mine is None:
                found |= {name} if result.tests_run else set()
            elif any(pred(c) is not False for c in mine):
                found.add(name)
    return [n for n in dict.fromkeys(n for t in targets for n in t.names) if n not in found]

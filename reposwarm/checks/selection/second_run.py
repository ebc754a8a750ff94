"""The second run of the base-tests comparison (reposwarm/checks/changed_tests.py), cut to what it must run (issue
49): the tests the changed test paths reach, each command's own runner selecting them, never the whole profile
when less will do.

The comparison runs the base commit's tests against the merged code, in a checkout of the merged tree with the
test paths the lanes changed put back as the base has them (changed_tests_git.base_tests_tree). Every other file
of that tree is the merged tree's own, so a test whose file and whose test-side imports did not change runs there
exactly as it ran in the check of the merged tree: the comparison can learn nothing from running it again.
`plan` therefore runs, per command of the check:

- nothing, when the comparison reads nothing of it: a command without per-test results on the base commit or on
  the merged tree (a linter, a build), whose `rewritten` and lost-test notes have no test to speak of;
- only the tests the changed test paths reach, through the import graph of the base commit
  (reposwarm/checks/selection/affected.py: a changed test file reaches itself, a changed helper the test files
  that import it), named with the command's own selector (reposwarm/checks/runners/select.py);
- nothing, when none of its tests is reached (a lane only added test files: the base has none of them);
- the whole command, said with why, when less cannot be named safely: test configuration changed (conftest.py,
  pytest.ini, a test section of pyproject.toml: it changes how every test runs), a change the graph cannot see
  through, a runner reposwarm cannot select for, a test name that is no plain selector, or test names that repeat
  across files (node, cargo: a run of some files numbers them differently from the whole run's "name #2").

`regrouped` gives the targeted runs' results back under the command they stand for, so the comparison reads them
exactly as it read a whole run's: cases by name, failures by the command's own line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reposwarm.checks import runners
from reposwarm.checks.runners import parsers, select
from reposwarm.checks.runners.parsers import Case
from reposwarm.checks.selection import affected, plans
from reposwarm.contracts import CheckProfile, CommandResult, TestFailure, TestReport
from reposwarm.symbols.index import SymbolIndexError

Argv = tuple[str, ...]
Store = Callable[[list[Case]], str]  # keeps a command's cases, gives their ref (the run's store)

_NUMBERED = re.compile(r"^(.*) #\d+$")


@dataclass(frozen=True)
class Planned:
    """What the second run runs: `profile.commands[i]` stands for the checked command `owners[i]`, whole (its
    target None) or only the tests `targets[i]` selects. `notes`: what it runs of each command, in words."""

    profile: CheckProfile
    owners: list[Argv] = field(default_factory=list)
    targets: list[select.Target | None] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def note(self) -> str:
        """The notes in one line, "; " between them (and only there: a check's parts join theirs sorted)."""
        return "; ".join(n.replace("; ", ", ") for n in self.notes)


def _repeats(cases: list[Case]) -> bool:
    """Whether the run numbered a name that repeats ("adds #2"): a run of some of its files numbers differently."""
    names = {c.name for c in cases}
    return any((m := _NUMBERED.match(c.name)) is not None and m.group(1) in names for c in cases)


def _unreached(reach: affected.Affected, paths: list[str], tree: Path) -> str:
    """Why the graph's answer is not enough: a changed test path the base has that is no test file reposwarm knows
    by its name and that no test reads (a test file a runner's configuration names, `check_*.py`): the runner may
    still run it, so only the whole command is sure to. "" when every such path is a test or reaches one."""
    if len(reach.why) >= affected.MAX_WHY:  # (the reasons are cut there: which paths reached a test is not known)
        return ""
    reached = set(reach.why.values())
    for path in paths:
        known = affected.test_kind(path) is not None or path.endswith("_test.go")
        if not known and path not in reached and (tree / path).is_file():
            return f"{path}: a changed test path that is no test file reposwarm knows, and no test reads it"
    return ""


def plan(profile: CheckProfile, tree: Path, base: str, paths: list[str], config: dict[str, str],
         compared: dict[Argv, list[Case]]) -> Planned:
    """Per command of `profile` (the check's, as it ran), what the second run runs in `tree` (the merged tree with
    the base's versions of `paths`, the test paths the lanes changed; `config`: those that are test configuration).
    `compared`: the commands the comparison reads (per-test results on the base and the merged tree), each with
    those results (both trees'). Each decision is said in `notes`."""
    commands: list[list[str]] = []
    owners: list[Argv] = []
    targets: list[select.Target | None] = []
    notes: list[str] = []
    reach: affected.Affected | None = None
    every: dict[str, list[str]] | None = None

    def whole(argv: list[str], why: str) -> None:
        commands.append(argv)
        owners.append(tuple(argv))
        targets.append(None)
        notes.append(f"`{' '.join(argv)}` whole: {why}")

    for argv in profile.commands:
        line = " ".join(argv)
        if tuple(argv) not in compared:
            notes.append(f"`{line}` not run: it gave no per-test results to compare")
            continue
        if config:
            first = sorted(config)[0]
            whole(argv, f"{first}: test configuration changed ({config[first]}), which changes how every test runs")
            continue
        kind, why = plans.selectable(argv, tree)
        if not kind:
            whole(argv, why)
            continue
        if _repeats(compared[tuple(argv)]):
            whole(argv, "its test names repeat across files, which a run of some of them numbers differently")
            continue
        try:
            reach = reach or affected.affected(tree, base, paths, worktree=tree, named_tests=True)
        except SymbolIndexError as err:  # (git could not read the base commit's graph: nothing to select by)
            whole(argv, f"the import graph could not be read ({str(err)[:200]})")
            continue
        if reach.names is None:
            whole(argv, reach.fallback)
            continue
        if why := _unreached(reach, paths, tree):
            whole(argv, why)
            continue
        names = reach.names.get(kind, [])
        if why := plans.unsafe_names(names, tree):
            whole(argv, why)
            continue
        mine = plans.claimed(argv, names, tree)
        if not mine:
            every = every or affected.all_tests(tree, base)
            if not plans.claimed(argv, every.get(kind, []), tree):
                whole(argv, "reposwarm cannot tell which of the tree's tests it runs")
            else:
                notes.append(f"`{line}` not run: none of its tests is a changed test path or reads one")
            continue
        chosen = select.plan([argv], mine, tree).targets
        if not chosen:  # (claimed, yet no target: never expected; the whole command is the safe answer)
            whole(argv, "its selector named none of them")
            continue
        for target in chosen:
            commands.append(target.argv)
            owners.append(tuple(argv))
            targets.append(target)
        shown = ", ".join(mine[:3]) + (f" and {len(mine) - 3} more" if len(mine) > 3 else "")
        notes.append(f"`{line}`: {len(mine)} {plans.NOUNS.get(kind, 'test')}{'' if len(mine) == 1 else 's'} "
                     f"({shown})")
    return Planned(profile.model_copy(update={"commands": commands}), owners, targets, notes)


def regrouped(planned: Planned, ran: TestReport, cases: Callable[[CommandResult], list[Case] | None],
              keep: Store) -> TestReport:
    """The second run's report as the comparison reads it: one result per checked command (the targets' cases
    together, kept under a ref of their own), failures under that command's line."""
    results: dict[Argv, list[tuple[select.Target | None, CommandResult]]] = {}
    for owner, target, result in zip(planned.owners, planned.targets, ran.commands, strict=False):
        results.setdefault(owner, []).append((target, result))
    lines = {" ".join(t.argv): " ".join(t.command) for t in planned.targets if t is not None}
    commands: list[CommandResult] = []
    for owner, runs in results.items():
        if len(runs) == 1 and runs[0][0] is None:
            commands.append(runs[0][1])
            continue
        found = [cases(result) for _, result in runs]
        together = None if any(f is None for f in found) else [c for f in found for c in f or []]
        first = runs[0][1]
        commands.append(first.model_copy(update={
            "argv": list(owner), "cases_ref": keep(together) if together is not None else None,
            "tests_run": None if together is None else len(runners.ran(together)),
            "duration_s": round(sum(r.duration_s for _, r in runs), 3),
            "exit_code": next((r.exit_code for _, r in runs if r.exit_code != 0), first.exit_code)}))

    def owned(failure: TestFailure) -> TestFailure:
        line = lines.get(failure.command)
        if line is None:
            return failure
        name = line if failure.name == failure.command and failure.file is None else failure.name
        return failure.model_copy(update={"command": line, "name": name})

    counted = [c.tests_run for c in commands if c.tests_run is not None]
    return ran.model_copy(update={"commands": commands, "failures": [owned(f) for f in ran.failures],
                                  "flaky": [owned(f) for f in ran.flaky],
                                  "tests_run": sum(counted) if counted else None})


def expected(planned: Planned, compared: dict[Argv, list[Case]]) -> frozenset[str]:
    """The second run's failures no comparison reads, as their TestFailure.key: tests that already fail on the base
    commit or on the merged tree (`rewritten` reads tests that passed on both; a lost test passed on the base).
    A command failing only those is not run again."""
    keys: set[str] = set()
    for argv, owner in zip(planned.profile.commands, planned.owners, strict=True):
        line = " ".join(argv)
        keys |= {f"{line}::{c.file or ''}::{c.name}" for c in compared.get(owner, [])
                 if c.outcome in parsers.FAILING}
    return frozenset(keys)

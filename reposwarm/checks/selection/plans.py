"""What a check runs of its profile (issue 37): each command whole, only the tests the changes affect, or not at all;
in one part, or split into shards that run as separate activities on any worker host.

`plan` decides it on a checkout of the checked tree, from the changes since the commit the check is judged against:

- a command's `when:` globs: not run when no changed path matches one (said, with the globs);
- `selection: affected`: a command whose runner can select tests (reposwarm/checks/runners/select.py) runs only the
  tests the import graph says the changes reach (reposwarm/checks/selection/affected.py); a change the graph cannot see through
  (a build or lock file, test configuration, a language it does not parse) runs it whole, and says which file; a
  command whose runner cannot select runs whole too, and says why; one none of whose tests is affected is not run;
- scope `remainder`: the tests a selected check of the same changes did not run (the whole profile then guards the
  review or the delivery: CheckProfile.full_at);
- `shards: N`: the command's tests split into N groups balanced by the last run's durations, one part each.

`part_profile` turns a part back into argv lists (each target with its runner's selector) on the tree a part runs
in, and `narrowed` cuts the base commit's report to the tests each target selects, so what a part did not run is
never lost or missing. The same names give the same targets on every host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reposwarm.checks.runners import jscollect, prefixes, select
from reposwarm.checks.runners.commands import JUNIT
from reposwarm.checks.runners.parsers import Case
from reposwarm.checks.runners.selectors import SELECT
from reposwarm.checks.selection import affected, shards
from reposwarm.contracts import CheckPart, CheckPlan, CheckProfile, CommandResult, TestReport
from reposwarm.slices.policy import spec

MAX_CHANGED_SHOWN = 50
Durations = Callable[[list[str]], dict[str, float]]  # a command's argv -> seconds per test, from its last run


@dataclass
class _Entry:
    argv: list[str]
    names: list[str] | None  # None: whole
    kind: str = ""


NOUNS = {"python": "python test file", "js": "JavaScript test file", "go": "go test package", "cargo": "crate"}


def selectable(argv: list[str], root: Path) -> tuple[str, str]:
    """(the runner's kind of tests, "") when the command can run only some of its tests; ("", why) otherwise."""
    if any(JUNIT in a for a in argv):
        return "", "it writes its own JUnit report ({junit}): reposwarm does not know how its runner selects tests"
    view = prefixes.look(argv, root)
    if not view.runner:
        return "", "no test runner reposwarm knows" + (f" ({view.why})" if view.why else "")
    if view.workdir is None or view.runner not in SELECT or view.runner not in affected.RUNNER_KIND:
        return "", f"reposwarm cannot select {view.runner} tests this command runs"
    if view.runner in ("jest", "vitest") and (rules := jscollect.collection(view, root)).matches is None:
        return "", f"which files it runs as tests is not known ({rules.why})"
    return affected.RUNNER_KIND[view.runner], ""


def claimed(argv: list[str], names: list[str], root: Path) -> list[str]:
    """The names this command runs (its runner's selector takes them, among its own tests)."""
    if not names:
        return []
    found = select.plan([argv], names, root)
    return sorted({n for t in found.targets for n in t.names})


def unsafe_names(names: list[str], root: Path) -> str:
    """Why the tree's test names cannot be given to a runner as they are (a file named like an option, a symlink
    out of the tree): the command then runs whole; "" when every name is a plain selector."""
    for name in names:
        if why := select.unsafe(name, root):
            return f"the test file {name[:80]!r} {why}: the whole command runs"
    return ""


def _deleted_test(path: str, kind: str, root: Path) -> bool:
    """A test file of this kind the changes deleted (or renamed): its tests are lost unless the whole command runs."""
    if (root / path).exists() or (root / path).is_symlink():
        return False
    return affected.test_kind(path) == kind or (kind == "go" and path.endswith("_test.go")) or (
        kind == "cargo" and path.endswith(".rs"))


def _selected(argv: list[str], kind: str, chosen: affected.Affected, runs: list[str], root: Path,
              changed: list[str]) -> tuple[list[str] | None, str]:
    """The affected tests this command runs; None (and why, "" when it need not be said) for the whole command:
    the graph cannot see through a change, a test file of its was deleted, or every test of it is affected
    (`runs`: the tree's tests this command runs)."""
    if chosen.names is None:
        return None, chosen.fallback
    if why := unsafe_names(chosen.names.get(kind, []), root):
        return None, why
    gone = [p for p in changed if _deleted_test(p, kind, root)]
    if gone:
        return None, f"{gone[0]} was deleted or renamed: the whole command runs, so a lost test is seen"
    mine = claimed(argv, chosen.names.get(kind, []), root)
    if mine and set(mine) == set(runs):
        return None, ""  # (every test of it is affected: the command as it is)
    return mine, ""


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def plan(root: Path, ref: str, since: str, profile: CheckProfile, scope: str, durations: Durations, *,
         changed: list[str] | None = None, worktree: Path | None = None, single: bool = False) -> CheckPlan:
    """The parts a check of `root` (a checkout of `ref`) runs; `since`: the commit it is judged against. A lane's
    check gives its `changed` files (committed or not) and its `worktree`, and runs in one part (`single`)."""
    if changed is None:
        changed = affected.changed_files(root, since, ref) if since else None
    chosen: affected.Affected | None = None
    every: dict[str, list[str]] | None = None
    totals: dict[str, set[str]] = {}  # kind -> the tree's tests the selectable commands run ("14 of 1,600")
    entries: list[_Entry] = []
    skipped: list[str] = []
    whole_why: list[str] = []
    selective = scope != "all" and profile.selection == "affected" and changed is not None
    for argv in profile.commands:
        line, rule = " ".join(argv), profile.rule(argv)
        if rule.when and changed is not None and not any(spec(rule.when).match_files(changed)):
            skipped.append(f"`{line}`: not run: the changes touch none of its when: paths ({', '.join(rule.when)})")
            continue
        if not selective and rule.shards <= 1:
            entries.append(_Entry(argv, None))
            continue
        if selective and profile.selector != "graph":  # the repository's own build tool says, in the sandbox
            if scope == "remainder":
                skipped.append(f"`{line}`: {profile.selector} chose what ran of it in the selected check")
            else:
                entries.append(_Entry(argv, None, "tool"))
            continue
        kind, why = selectable(argv, root)
        if not kind:
            if scope == "remainder":
                skipped.append(f"`{line}`: ran whole in the selected check ({why})")
            else:
                entries.append(_Entry(argv, None))
                # (a command that is no test runner reposwarm knows is not one a selection narrows: not said)
                whole_why += [f"`{line}` whole: {why}"] if selective and not why.startswith("no test runner") else []
            continue
        if selective:
            chosen = chosen or affected.affected(root, ref, changed or [], worktree=worktree)
            every = every or affected.all_tests(root, ref)
            runs = claimed(argv, every.get(kind, []), root) if chosen.names is not None else []
            totals.setdefault(kind, set()).update(runs)
            names, why = _selected(argv, kind, chosen, runs, root, changed or [])
            if names is None:  # the whole command: in the selected check, never in the remainder
                if scope == "remainder":
                    skipped.append(f"`{line}`: ran whole in the selected check ({why})")
                else:
                    entries.append(_Entry(argv, None))
                    whole_why += [f"`{line}` whole: {why}"] if why else []
                continue
            if scope == "remainder":
                picked = set(names)
                names = [n for n in every.get(kind, []) if n not in picked]
        else:
            every = every or affected.all_tests(root, ref)
            names = every.get(kind, [])
            if unsafe_names(names, root):  # (shards split names: a file named as an option splits nothing)
                entries.append(_Entry(argv, None))
                continue
        mine = claimed(argv, names, root)
        if not mine and not (names is not every.get(kind) and claimed(argv, every.get(kind, []), root)):
            # No test of the tree is one this command's selector can name (`unittest discover -s DIR` without
            # `-t .`): reposwarm cannot tell which tests it runs, so "none affected" would be a guess. It runs whole.
            why = "reposwarm cannot tell which of the tree's tests it runs"
            if scope == "remainder":
                skipped.append(f"`{line}`: ran whole in the selected check ({why})")
            else:
                entries.append(_Entry(argv, None))
                whole_why += [f"`{line}` whole: {why}"] if selective else []
            continue
        if not mine:
            skipped.append(f"`{line}`: " + ("every test it runs ran in the selected check" if scope == "remainder"
                                            else "none of its tests is affected by the changes" if selective
                                            else "no test of it is known to reposwarm's selection"))
            continue
        entries.append(_Entry(argv, mine, kind))
    label = _label(scope, selective, entries, {k: len(v) for k, v in totals.items()}, changed, whole_why, skipped)
    parts = _sharded(entries, profile, durations, label, skipped, single, changed or [], since)
    shown = (changed or [])[:MAX_CHANGED_SHOWN]
    if not parts and selective:
        label = ("the remainder: nothing the selected check did not run" if scope == "remainder" else
                 f"affected: no test, from {_count(len(changed or []), 'changed file')}")
    return CheckPlan(parts=parts, changed=shown, changed_count=len(changed or []), fallback="; ".join(whole_why),
                     label=label, skipped=skipped)


def _label(scope: str, selective: bool, entries: list[_Entry], totals: dict[str, int],
           changed: list[str] | None, whole_why: list[str], skipped: list[str]) -> str:
    """What the check says it ran, beside its verdict; "" (or "whole profile: why") for the whole profile."""
    if not selective:
        return ""
    if entries and all(e.names is None and e.kind != "tool" for e in entries) and not skipped:
        return f"whole profile: {'; '.join(whole_why)}" if whole_why else ""
    tools = [e for e in entries if e.kind == "tool"]
    if tools:
        return f"affected, as the build tool says: {_count(len(changed or []), 'changed file')}"
    ran: dict[str, set[str]] = {}
    for e in entries:
        if e.names is not None:
            ran.setdefault(e.kind, set()).update(e.names)
    counts = ", ".join(f"{len(names):,}" + (f" of {totals[kind]:,}" if totals.get(kind) else "")
                       + f" {NOUNS.get(kind, 'test')}{'' if len(names) == 1 and not totals.get(kind) else 's'}"
                       for kind, names in ran.items()) or "no test"
    if scope == "remainder":
        text = f"the remainder: {counts} the selected check did not run"
    else:
        text = f"affected: {counts}, from {_count(len(changed or []), 'changed file')}"
    return text + (f"; {'; '.join(whole_why)}" if whole_why else "")


def _sharded(entries: list[_Entry], profile: CheckProfile, durations: Durations, label: str,
             skipped: list[str], single: bool, changed: list[str], since: str) -> list[CheckPart]:
    groups: dict[int, list[list[str]]] = {}
    for i, e in enumerate(entries):
        n = 1 if single else profile.rule(e.argv).shards
        if e.names is not None and n > 1 and len(e.names) > 1:
            groups[i] = shards.split(e.names, durations(e.argv), min(n, len(e.names)))
    count = max([len(g) for g in groups.values()] + [1 if entries else 0])
    parts: list[CheckPart] = []
    for k in range(count):
        whole: list[str] = []
        names: dict[str, list[str]] = {}
        for i, e in enumerate(entries):
            line = " ".join(e.argv)
            if i in groups:
                if k < len(groups[i]):
                    names[line] = groups[i][k]
            elif k == 0:
                if e.names is None:
                    whole.append(line)
                else:
                    names[line] = e.names
        tool = [" ".join(e.argv) for e in entries if e.kind == "tool"] if k == 0 else []
        parts.append(CheckPart(whole=whole, names=names, label=label, shard=(k + 1, count),
                               skipped=skipped if k == 0 else [], tool=tool, changed=changed if tool else [],
                               since=since if tool else ""))
    return parts


@dataclass(frozen=True)
class Ran:
    """A part as argv lists: `profile` runs them; `targets[i]` is the Target of `profile.commands[i]`, or None when
    that command runs whole."""

    profile: CheckProfile
    targets: list[select.Target | None]


def part_profile(profile: CheckProfile, part: CheckPart, root: Path) -> Ran:
    """The profile's commands this part runs, in the profile's order: whole, or each target of its named tests."""
    commands: list[list[str]] = []
    targets: list[select.Target | None] = []
    for argv in profile.commands:
        line = " ".join(argv)
        if line in part.whole:
            commands.append(argv)
            targets.append(None)
        elif part.names.get(line):
            for target in select.plan([argv], part.names[line], root).targets:
                commands.append(target.argv)
                targets.append(target)
    if not commands:  # (nothing of the profile in this part: the caller runs nothing)
        return Ran(profile, [])
    return Ran(profile.model_copy(update={"commands": commands}), targets)


Loader = Callable[[CommandResult], "list[Case] | None"]


def narrowed(baseline: TestReport, ran: Ran, results: list[CommandResult], cases: Loader) -> tuple[TestReport, Loader]:
    """The base commit's report as this part ran: whole commands as they are, targeted ones cut to their tests."""
    pairs = [(t, r) for t, r in zip(ran.targets, results, strict=False) if t is not None]
    if not pairs:
        return baseline, cases
    cut, loader = select.narrow(baseline, [t for t, _ in pairs], [r for _, r in pairs], cases)
    whole = {tuple(r.argv) for t, r in zip(ran.targets, results, strict=False) if t is None}
    lines = {" ".join(a) for a in whole}
    kept = [c for c in baseline.commands if tuple(c.argv) in whole]
    ran_counts = [c.tests_run for c in kept + cut.commands if c.tests_run is not None]
    return baseline.model_copy(update={
        "commands": kept + cut.commands,
        "failures": [f for f in baseline.failures if f.command in lines] + cut.failures,
        "pre_existing": [f for f in baseline.pre_existing if f.command in lines] + cut.pre_existing,
        "tests_run": sum(ran_counts) if ran_counts else None, "flaky": []}), loader

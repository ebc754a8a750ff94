"""The base commit's results after the base moved (issue 37): the old base's report, with the tests the new commits
affect run again on the new base and put in place of theirs, per test; the rest kept as they were.

`rebased` takes the old baseline and a part's raw report on the new base (reposwarm/checks/selection/plans.py: the commands
the new commits reach, whole or cut to their tests); a command the part ran whole replaces the old one, a command
it ran targets of keeps its old cases the targets do not select and takes the targets' cases and failures, and a
command the part did not run (nothing of it is affected) is kept as it was. A command without per-test results on
the old base cannot be merged per test: it is kept only when the part did not run it.
"""

from __future__ import annotations

import dataclasses

from reposwarm.checks import runners
from reposwarm.checks.runners.parsers import Case
from reposwarm.checks.selection.plans import Ran
from reposwarm.checks.verdicts import CaseLoader
from reposwarm.contracts import CommandResult, ExitClass, TestFailure, TestReport
from reposwarm.runs.store import Store


def rebased(old: TestReport, ran: Ran, new: TestReport, cases: CaseLoader, store: Store,
            ref: str) -> TestReport | None:
    """The baseline of `ref` (the new base): `old`'s results, with what `ran` ran on `ref` in their place; None when
    a command ran cannot be merged per test (the caller runs the whole profile instead)."""
    pairs = list(zip(ran.targets, new.commands, strict=False)) if len(new.commands) == len(ran.targets) else []
    commands: list[CommandResult] = []
    failures: list[TestFailure] = []
    flaky: list[TestFailure] = []
    for base in old.commands:
        line = " ".join(base.argv)
        whole = [r for t, r in pairs if t is None and r.argv == base.argv]
        cut = [(t, r) for t, r in pairs if t is not None and t.command == base.argv]
        mine = [f for f in old.failures + old.pre_existing if f.command == line]
        if whole:
            commands.append(whole[0])
            failures += [f for f in new.failures if f.command == line]
            flaky += [f for f in new.flaky if f.command == line]
        elif not cut:
            commands.append(base)
            failures += mine
            flaky += [f for f in old.flaky if f.command == line]
        else:
            before = cases(base)
            now = [cases(r) for _, r in cut]
            if before is None or any(c is None for c in now):  # (no per-test results: run it whole instead)
                return None
            kept = [c for c in before if not any(t.covers(c) is not False for t, _ in cut)]
            taken = [c for found in now for c in found or []]
            names = {c.name for c in kept}
            argvs = {" ".join(r.argv) for _, r in cut}
            failures += [f for f in mine if f.name in names]
            failures += [f.model_copy(update={"command": line}) for f in new.failures if f.command in argvs]
            flaky += [f.model_copy(update={"command": line}) for f in new.flaky if f.command in argvs]
            commands.append(_merged(base, [r for _, r in cut], kept + taken, store))
    counted = [c.tests_run for c in commands if c.tests_run is not None]
    problems = [p for p in map(runners.not_fully_judged, commands) if p]
    return TestReport(passed=not failures and not problems, failures=failures, flaky=flaky, commands=commands,
                      problems=problems, ref=ref, duration_s=new.duration_s, unsandboxed=old.unsandboxed or
                      new.unsandboxed, tests_run=sum(counted) if counted else None,
                      setup=[*new.setup, f"the base moved from {old.ref[:12]}: only the tests its new commits affect "
                                         f"ran again on {ref[:12]}"])


def _merged(base: CommandResult, ran: list[CommandResult], cases: list[Case], store: Store) -> CommandResult:
    bad = runners.failing(cases)
    worst = max((r.exit_class for r in ran if r.exit_class is not None), key=lambda e: e.severity, default=None)
    exit_class = worst if worst is not None and worst.severity > ExitClass.tests_failed.severity else (
        ExitClass.tests_failed if bad else ExitClass.passed)
    return base.model_copy(update={
        "cases_ref": store.put_json([dataclasses.asdict(c) for c in cases]),
        "tests_run": len({c.name for c in runners.ran(cases)}), "exit_class": exit_class,
        "exit_code": 0 if exit_class == ExitClass.passed else next(
            (r.exit_code for r in ran if r.exit_code not in (0, None)), 1),
        "duration_s": base.duration_s, "reason": "" if exit_class == ExitClass.passed else base.reason or
        next((r.reason for r in ran if r.reason), ""),
        "output_tail": "\n".join(r.output_tail[-1000:] for r in ran)[-4000:]})


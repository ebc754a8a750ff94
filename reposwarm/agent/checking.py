"""A lane's `run_checks`: the tests its change affects (the default), the tests it names, or the whole profile, in
its worktree's sandbox, judged against the same tests of the base commit's run; answered as text the model reads.

What runs is said first, beside the verdict ("checks PASSED (affected: 3 tests of 1,600, from 2 changed files)"): a
run of some tests is never told as a run of the whole profile, which the gate still runs before the review
(CheckProfile.full_at).
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field

from reposwarm.agent.specs import RunChecksArgs
from reposwarm.checks import evidence, exercised, sandbox, verdicts
from reposwarm.checks.runner import load_cases, run_profile
from reposwarm.checks.runners import select
from reposwarm.checks.sandbox import SandboxUnavailable
from reposwarm.checks.selection import affected, plans
from reposwarm.contracts import CheckProfile, TestReport
from reposwarm.runs.store import Store
from reposwarm.slices.policy import PathPolicy, ToolRefused
from reposwarm.symbols.index import SymbolIndexError

MAX_OUTPUT_TAIL = 3000


@dataclass
class Chosen:
    """What this call runs: `ran` None for the whole profile."""

    ran: plans.Ran | None = None
    note: str = ""
    lines: list[str] = field(default_factory=list)  # said after the verdict: what did not run, and why
    targeted: list[select.Target] = field(default_factory=list)  # the named tests' targets (for `unmatched`)


def targeted(tests: list[str], profile: CheckProfile, name: str, policy: PathPolicy) -> Chosen:
    """The named tests, or a refusal the model reads: names that are no plain selector, or a profile none of whose
    commands can select them."""
    why = select.refusal(tests, policy.root)
    if why:
        raise ToolRefused(why)
    found = select.plan(profile.commands, tests, policy.root)
    if not found.targets:
        said = [f"`{c}`: {w}" for c, w in found.skipped] + [f"`{n}`: {w}" for n, w in found.unclaimed[:5]]
        raise ToolRefused(f"run_checks refused: no command of profile {name!r} can run only the tests named ("
                          + "; ".join(said)[:2000] + "); run_checks without tests runs the tests your change affects")
    ran = plans.Ran(profile.model_copy(update={"commands": [t.argv for t in found.targets]}), list(found.targets))
    lines = [f"skipped for this targeted run: `{c}`: {why}" for c, why in found.skipped]
    lines += [f"not run: `{n}`: {why}" for n, why in found.unclaimed]
    return Chosen(ran, "", lines, list(found.targets))


def affected_only(profile: CheckProfile, policy: PathPolicy, since: str) -> Chosen:
    """The tests the lane's change (since the base commit, committed or not) affects, in one part."""
    root = policy.root
    changed = affected.worktree_changes(root, since)
    made = plans.plan(root, "HEAD", since, profile, "affected", lambda argv: {}, changed=changed, worktree=root,
                      single=True)
    lines = [f"not run: {line}" for line in made.skipped]
    lines += [f"ran whole: {made.fallback}"] if made.fallback else []
    lines.append("(run_checks with scope \"all\" runs every test of the profile; the gate runs the rest before the "
                 "review)")
    if not made.parts:
        return Chosen(None, made.label or "affected: no test", lines)
    ran = plans.part_profile(profile, made.parts[0], root)
    return Chosen(ran if ran.targets else None, made.label, lines)


def run(a: RunChecksArgs, profile: CheckProfile, name: str, policy: PathPolicy, store: Store | None,
        baseline: TestReport | None, waiting: bool) -> str:
    """Run what the call asks for and say how it went. `waiting`: the run's base commit results are not in yet."""
    if a.tests:
        chosen = targeted(a.tests, profile, name, policy)
    elif a.scope == "affected" and profile.selection == "affected" and baseline is not None and baseline.ref:
        chosen = affected_only(profile, policy, baseline.ref)
        if chosen.ran is None:  # nothing of the profile is affected by the change
            return "\n".join([f"checks PASSED ({chosen.note}): no test to run for this change", *chosen.lines])
    else:
        chosen = Chosen()
    ran = chosen.ran
    try:
        # Tools run in the worker's thread pool; the checks get an event loop of their own.
        # (their git view holds only what this lane may read: no other lane's branch, none of HEAD's other paths)
        readable = (*policy.allowed_patterns, *policy.read_only_patterns)
        report = asyncio.run(_checked(ran.profile if ran else profile, policy, store, readable,
                                      baseline.ref if baseline is not None else ""))
    except SandboxUnavailable as err:
        raise ToolRefused(str(err)) from None

    cases = functools.partial(load_cases, store)
    if ran is None or len(report.commands) != len(ran.targets):  # (a failed setup step ran no command)
        report = verdicts.judge(report, baseline, cases)
    else:  # against the same tests of the base commit's run, and never called a run of the whole profile
        narrowed, loader = plans.narrowed(baseline, ran, report.commands, cases) if baseline is not None \
            else (None, cases)
        report = verdicts.judge(report, narrowed, loader)
        if chosen.targeted:
            missing = [f"`{n}`: no test the targeted run reported matches it (misnamed? gone?)"
                       for n in select.unmatched(chosen.targeted, report.commands, cases)]
            report = verdicts.settle(report.model_copy(update={"problems": [*report.problems, *missing]}))
    # (as the gate holds it: a changed file no command loaded fails where the profile requires them all exercised)
    report = verdicts.required(report, profile.require_exercised)
    note = chosen.note or ("" if not chosen.targeted else select.described(
        list(dict.fromkeys(n for t in chosen.targeted for n in t.names)), report.tests_run))
    return _said(report, note, chosen, baseline, waiting)


async def _checked(profile: CheckProfile, policy: PathPolicy, store: Store | None, readable: tuple[str, ...],
                   since: str) -> TestReport:
    """The profile run in the lane's worktree, its evidence held against what the lane changed since the base commit
    (committed or not): a changed module its tests loaded from outside the tree makes the check NOT JUDGED."""
    watched = None
    if since:
        try:
            changed = await asyncio.to_thread(affected.worktree_changes, policy.root, since)
            watched = await evidence.watched_in(policy.root, since, changed)
        except (OSError, SymbolIndexError):  # (git cannot say: the evidence speaks of no changed file)
            watched = None
    return await run_profile(profile, policy.root, store, readable=readable, watched=watched,
                             scope=f"lane:{store.run_id}/{policy.root.name}" if store is not None else "")


def _said(report: TestReport, note: str, chosen: Chosen, baseline: TestReport | None, waiting: bool) -> str:
    lines = [f"checks {verdicts.summary(report, note)}, in {report.duration_s:.1f}s"]
    if chosen.targeted:
        judged = ", judged against the same tests on the base commit" if baseline is not None else ""
        lines.append(f"targeted run: only the tests named ran{judged} (run_checks without tests runs the tests your "
                     "change affects; the gate runs the whole profile)")
    lines += chosen.lines
    if waiting:
        lines.append("(the base commit's results are not in yet: failures are not told apart from ones the "
                     "base commit has too, and the whole profile runs)")
    if report.unsandboxed:
        lines.append(f"warning: {sandbox.OFF_WARNING}")
    lines += [f"problem: {p}" for p in report.problems]
    # (whether the checks ran your change's own code: a module loaded from outside the tree judges nothing)
    lines += exercised.lines(report)
    lines += [f"dependencies: {line}" for line in report.setup]  # the profile's setup step: ran, or restored
    # (the gate says the same of these, and sends lost tests back first: reposwarm/checks/changed_tests.py)
    lines += [f"test change ({c.kind}): {c.test}: {c.detail}" for c in report.test_changes[:20]]
    lines += [f"failing (new): {f.name}" + (f" ({f.file})" if f.file else "") for f in report.failures]
    lines += [f"failing on the base commit too: {f.name}" for f in report.pre_existing[:10]]
    if len(report.pre_existing) > 10:
        lines.append(f"... and {len(report.pre_existing) - 10} more failing on the base commit too")
    lines += [f"fixed (failing on the base commit): {f.name}" for f in report.fixed[:10]]
    lines += [f"flaky (failed, then passed on a re-run): {f.name}" for f in report.flaky]
    for result in report.commands:
        state = ("timed out" if result.timed_out else "ended at its output cap" if result.exit_code is None
                 else f"exit {result.exit_code}")
        lines.append(f"$ {' '.join(result.argv)}  ({state}; full log {result.log_ref})\n"
                     f"{result.output_tail[-MAX_OUTPUT_TAIL:]}")
    return "\n".join(lines)


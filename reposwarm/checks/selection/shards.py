"""Shards: a command's tests split into groups that run as separate activities, on any worker host, and the
groups' judged reports merged back into one verdict.

`durations` sums the per-test times a run reported (runners.Case.duration_s) per test file; `split` deals names
(test files, go packages, crates: whatever the runner's selector takes) into n groups balanced by those times,
longest first onto the least loaded group (LPT: the longest group is within 4/3 of the best split); `merge` makes
one report of the shards' reports, each judged against the base commit's results cut to its own tests
(reposwarm/checks/runners/select.py narrow), so the merged verdict is per test, as the whole command's would be.
"""

from __future__ import annotations

import functools
import heapq
import math
import operator
import statistics
from collections.abc import Callable, Iterable

from reposwarm.checks import exercised, verdicts
from reposwarm.checks.runners import Case
from reposwarm.contracts import TestReport

UNKNOWN_S = 1.0  # what a name weighs when no duration is known at all


def durations(cases: list[Case], key: Callable[[Case], str | None] | None = None) -> dict[str, float]:
    """Seconds per test file (Case.file), summed over its tests; a test with no file counts under its own name.
    `key`: another grouping (go's packages from "example.com/m/pkg.TestX"); a case it gives None for is left out.
    Tests that report no time add nothing (a file none of whose tests report one is not in the answer)."""
    out: dict[str, float] = {}
    for case in cases:
        if case.duration_s is None or not math.isfinite(case.duration_s) or case.duration_s < 0:
            continue
        where = key(case) if key is not None else (case.file or case.name)
        if where is not None:
            out[where] = out.get(where, 0.0) + case.duration_s
    return {k: round(v, 6) for k, v in out.items()}


def weights(names: Iterable[str], known: dict[str, float]) -> dict[str, float]:
    """Each name's weight: its known duration, else the median of the known ones (of these names), else 1.0."""
    names = list(dict.fromkeys(names))
    given = {n: known[n] for n in names if n in known and math.isfinite(known[n]) and known[n] >= 0}
    fill = statistics.median(given.values()) if given else UNKNOWN_S
    return {n: given.get(n, fill) for n in names}


def split(names: list[str], durations: dict[str, float], n: int) -> list[list[str]]:
    """`names` in `n` groups balanced by `durations`: longest first, each onto the group least loaded so far (ties:
    the group with fewer names, then the first). Deterministic for the same input; every name (once, duplicates
    dropped) in exactly one group; no group empty when there are at least `n` names (fewer: the last groups
    are); each group sorted."""
    if n < 1:
        raise ValueError(f"a split needs at least one group, not {n}")
    weight = weights(names, durations)
    groups: list[list[str]] = [[] for _ in range(n)]
    heap = [(0.0, 0, i) for i in range(n)]  # (load, names in it, index): the least loaded group on top
    for name in sorted(weight, key=lambda m: (-weight[m], m)):
        load, count, i = heapq.heappop(heap)
        groups[i].append(name)
        heapq.heappush(heap, (load + weight[name], count + 1, i))
    return [sorted(g) for g in groups]


def loads(groups: list[list[str]], durations: dict[str, float]) -> list[float]:
    """Each group's weight as `split` counted it (a name with no known duration weighs the median)."""
    weight = weights([m for g in groups for m in g], durations)
    return [round(sum(weight[m] for m in g), 6) for g in groups]


def _once(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def merge(reports: list[TestReport], label: str = "") -> TestReport:
    """One report from the shards' judged reports: what each ran and found, in order; the tests that ran summed
    (None only when no shard gave per-test results); the time the longest shard took (they ran in parallel); the
    verdict settled from what they hold together (one red shard makes it FAILED, naming its failing tests; a changed
    module one of them loaded from outside the tree makes it NOT JUDGED: reposwarm/checks/exercised.py merged).
    `label`: what the merged check says it ran (else the first shard's)."""
    if not reports:
        raise ValueError("no shard reports to merge")
    first = reports[0]

    def total(values: list[int | None]) -> int | None:
        given = [v for v in values if v is not None]
        return sum(given) if given else None

    base_s = [r.base_tests_s for r in reports if r.base_tests_s is not None]
    changes = []
    for change in (c for r in reports for c in r.test_changes):
        if change not in changes:  # (a test configuration changed is found by every shard it touches)
            changes.append(change)
    merged = first.model_copy(update={
        "commands": [c for r in reports for c in r.commands],
        "failures": [f for r in reports for f in r.failures],
        "pre_existing": [f for r in reports for f in r.pre_existing],
        "fixed": [f for r in reports for f in r.fixed],
        "flaky": [f for r in reports for f in r.flaky],
        "test_changes": changes,
        "problems": _once(p for r in reports for p in r.problems),
        "setup": _once(line for r in reports for line in r.setup),
        "skipped": _once(s for r in reports for s in r.skipped),
        "tests_run": total([r.tests_run for r in reports]),
        "base_tests_run": total([r.base_tests_run for r in reports]),
        "duration_s": max(r.duration_s for r in reports),
        "unsandboxed": any(r.unsandboxed for r in reports),
        "base_tests_s": round(sum(base_s), 3) if base_s else None,
        "base_tests_paths": sum(r.base_tests_paths for r in reports),
        "second_run": "; ".join(sorted({x for r in reports if r.second_run for x in r.second_run.split("; ")})),
        "second_run_tests": total([r.second_run_tests for r in reports]),
        # (the parts' own times, summed: the work the check cost, whether its parts ran side by side or not)
        "times": functools.reduce(operator.add, times) if (times := [r.times for r in reports if r.times]) else None,
        # (coverage is not additive over shards: none unless a single shard gave it)
        "coverage_delta": first.coverage_delta if len(reports) == 1 else None,
        "selection": label or first.selection,
        "ref": first.ref,
        # whether the parts together ran the change's own code (outside anywhere stays outside: NOT JUDGED)
        "exercise": exercised.merged(reports),
    })
    return verdicts.settle(merged)

"""The swarm's numbers: from the run's record on the Temporal server (`from_status`, what `report` shows from any
machine), or from a worker host's ledger (`report`, with `--home`: adds retries per lane).

changesets per hour: lanes merged (cleanly or by a resolution) per hour of the run;
parallel efficiency, per round: the lanes' own running time / (lanes x the time lanes were running in that round).
  Only lane-running time counts: checks, planning and the time a person takes to review do not. The run's figure
  pools its rounds (lane time over lanes x lane-running time, summed).
first-pass merge rate: lanes whose first merge had no conflict / lanes merged or conflicted.

`report` and `report --home` show the same figures for a run (issue 33): with --home, every figure the server's
record holds comes from it, and the host's ledger adds what only it knows (retries, per lane and in all), said
so. Only when the server has no record of the run do the figures come from the ledger alone, which counts as the
host saw it: every attempt of a model call, each merge of a lane (a repair's too), tool calls but `finish`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from pydantic import BaseModel

from reposwarm.contracts import SwarmStatus, TestReport, Usage
from reposwarm.contracts.cost import cache_line

CHECK_LINE = re.compile(r"^round \d+ check \d+ at ")  # a check of the merged tree, in the gate's history


class LaneFigures(BaseModel):
    lane: str
    dispatches: int = 0
    seconds: float = 0.0
    model_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    cache_read_tokens: int = 0  # of tokens_in: read from the provider's prompt cache
    tool_calls: int = 0
    refusals: int = 0
    tool_errors: int = 0
    retries: int | None = 0  # None from the server's record: retries are in the ledger only


class RoundFigures(BaseModel):
    round: int
    lanes: int
    lanes_s: float  # wall-clock time the round's lanes were running
    busy_s: float  # the lanes' own running time, summed
    parallel_efficiency: float | None
    merged: int = 0
    decision: str = ""
    rollbacks: int = 0


class CheckFigures(BaseModel):
    """The last check of the merged tree, per test, against the base commit."""

    passed: bool
    tests_run: int | None = None
    base_tests_run: int | None = None
    new_failures: int = 0
    pre_existing: int = 0
    fixed: int = 0
    flaky: int = 0
    problems: list[str] = []
    verdict: str = ""  # PASSED, PASSED WITH TEST CHANGES, FAILED ("" from a ledger written before verdicts)
    test_changes: list[str] = []  # "lost: tests.test_calc.test_add", one per lost, rewritten or reconfigured test
    selection: str = ""  # what ran when not every test did ("affected: 2 of 40 python test files, ..."; docs/scale.md)
    # Where the check's time went (TestReport.times: tree, sandbox, setup, commands, second run, results, total),
    # its parts' summed; {}: not known (a ledger or a record written before)
    times: dict[str, float] = {}
    second_run: str = ""  # what the second run ran (the base commit's tests against the merged code), in words
    second_run_tests: int | None = None  # how many tests it ran; None: no second run


class RunReport(BaseModel):
    run_id: str
    elapsed_s: float
    changesets: int
    changesets_per_hour: float
    parallel_efficiency: float | None
    first_pass_merge_rate: float | None
    tokens_in: int
    tokens_out: int
    cost_usd: float
    tool_calls: int
    refusals: int
    retries: int | None
    validations: int
    resolutions: int
    lanes: list[LaneFigures]
    last_check: CheckFigures | None = None
    tool_errors: int = 0
    rounds: list[RoundFigures] = []
    source: str = "ledger"  # "server": the run's record on the Temporal server; "ledger": a worker host's files
    model_calls: int = 0
    rollbacks: int = 0
    base_moved: str = ""
    from_ledger: list[str] = []  # the figures a worker host's ledger added to the server's (report --home)
    note: str = ""  # where the figures came from, when it is not the usual (the server's record out of reach)
    cache_read_tokens: int = 0  # of tokens_in: read from the providers' prompt caches
    cache_write_tokens: int = 0  # of tokens_in: written to them
    uncached_cost_usd: float = 0.0  # what the same calls would have cost with no caching


def _pooled(rounds: list[RoundFigures]) -> float | None:
    span = sum(r.lanes * r.lanes_s for r in rounds)
    return round(sum(r.busy_s for r in rounds) / span, 3) if span > 0 else None


def _joined(a: CheckFigures, b: CheckFigures) -> CheckFigures:
    """Two parts of one check as the gate merges them (reposwarm/checks/selection/shards.py merge)."""
    def plus(x: int | None, y: int | None) -> int | None:
        return None if x is None and y is None else (x or 0) + (y or 0)

    order = ("PASSED", "PASSED WITH TEST CHANGES", "FAILED")
    verdict = max(a.verdict, b.verdict, key=lambda v: order.index(v) if v in order else -1)
    return CheckFigures(passed=a.passed and b.passed, tests_run=plus(a.tests_run, b.tests_run),
                        base_tests_run=plus(a.base_tests_run, b.base_tests_run),
                        new_failures=a.new_failures + b.new_failures, pre_existing=a.pre_existing + b.pre_existing,
                        fixed=a.fixed + b.fixed, flaky=a.flaky + b.flaky,
                        problems=list(dict.fromkeys(a.problems + b.problems)), verdict=verdict,
                        test_changes=list(dict.fromkeys(a.test_changes + b.test_changes)),
                        times={k: round(a.times.get(k, 0.0) + b.times.get(k, 0.0), 3) for k in {**a.times, **b.times}},
                        # (sorted, as shards.merge joins them: the same words whatever order the parts ended in)
                        second_run="; ".join(sorted({x for part in (a.second_run, b.second_run) if part
                                                     for x in part.split("; ")})),
                        second_run_tests=plus(a.second_run_tests, b.second_run_tests),
                        selection=a.selection if a.selection in (b.selection, f"whole profile: {b.selection}")
                        or a.selection.endswith(f"; then {b.selection}") else
                        f"whole profile: {a.selection}; then {b.selection}")


def check_figures(report: TestReport) -> CheckFigures:
    return CheckFigures(passed=report.passed, tests_run=report.tests_run, base_tests_run=report.base_tests_run,
                        new_failures=len(report.failures), pre_existing=len(report.pre_existing),
                        fixed=len(report.fixed), flaky=len(report.flaky), problems=report.problems,
                        verdict=report.verdict_of.value,
                        test_changes=[f"{c.kind}: {c.test}" for c in report.test_changes], selection=report.selection,
                        times=report.times.model_dump() if report.times is not None else {},
                        second_run=report.second_run, second_run_tests=report.second_run_tests)


def from_status(status: SwarmStatus, elapsed_s: float) -> RunReport:
    """The figures from the run's own record (its status), which the Temporal server holds for every run."""
    lanes: dict[str, LaneFigures] = {}
    rounds = []
    for rec in status.rounds:
        ran = [ln for ln in rec.lanes if ln.dispatches]
        rounds.append(RoundFigures(round=rec.round, lanes=len(ran), lanes_s=rec.lanes_s,
                                   busy_s=round(sum(ln.seconds for ln in ran), 3),
                                   parallel_efficiency=rec.parallel_efficiency, merged=rec.merged,
                                   decision="; ".join(x for x in (rec.planning_error, rec.decision) if x),
                                   rollbacks=rec.rollbacks))
        for ln in rec.lanes:
            f = lanes.setdefault(ln.lane, LaneFigures(lane=ln.lane, retries=None))
            f.dispatches += ln.dispatches
            f.seconds = round(f.seconds + ln.seconds, 3)
            f.model_calls += ln.usage.model_calls
            f.tokens_in += ln.usage.input_tokens
            f.tokens_out += ln.usage.output_tokens
            f.cost_usd = round(f.cost_usd + ln.usage.cost_usd, 6)
            f.cache_read_tokens += ln.usage.cache_read_tokens
            f.tool_calls += ln.tool_calls
            f.refusals += ln.refusals
            f.tool_errors += ln.tool_errors
    changesets = sum(r.merged for r in rounds)
    # (a delivered run keeps its last check on the status once its review package is gone)
    report = status.review.test_report if status.review is not None else status.test_report
    return RunReport(
        run_id=status.run_id, elapsed_s=round(elapsed_s, 3), changesets=changesets,
        changesets_per_hour=round(changesets / (elapsed_s / 3600), 2) if elapsed_s > 0 else 0.0,
        parallel_efficiency=_pooled(rounds), first_pass_merge_rate=status.first_pass_merge_rate,
        tokens_in=status.usage.input_tokens, tokens_out=status.usage.output_tokens,
        cost_usd=round(status.usage.cost_usd, 6), cache_read_tokens=status.usage.cache_read_tokens,
        cache_write_tokens=status.usage.cache_write_tokens, uncached_cost_usd=round(status.usage.uncached_cost_usd, 6),
        tool_calls=sum(f.tool_calls for f in lanes.values()), refusals=sum(f.refusals for f in lanes.values()),
        tool_errors=sum(f.tool_errors for f in lanes.values()), retries=None,
        validations=sum(1 for v in status.validations if CHECK_LINE.match(v)),
        resolutions=len(status.resolutions), lanes=list(lanes.values()),
        last_check=check_figures(report) if report is not None else None, rounds=rounds, source="server",
        model_calls=status.usage.model_calls, rollbacks=sum(r.rollbacks for r in rounds), base_moved=status.base_moved)


def with_ledger(server: RunReport, host: RunReport) -> RunReport:
    """The server's figures, with what only a worker host's ledger knows: the retries, per lane and in all."""
    by_lane = {f.lane: f.retries for f in host.lanes}
    lanes = [f.model_copy(update={"retries": by_lane.get(f.lane, 0)}) for f in server.lanes]
    return server.model_copy(update={"lanes": lanes, "retries": host.retries, "source": "server+ledger",
                                     "from_ledger": ["retries"]})


def report(run_id: str, lines: list[dict[str, Any]]) -> RunReport:
    lanes: dict[str, LaneFigures] = {}
    spans: dict[int, list[tuple[float, float, str]]] = defaultdict(list)  # round -> (start, end, lane)
    opened: dict[tuple[str, str], tuple[float, int]] = {}
    first_merge: dict[str, bool] = {}
    changesets = resolutions = validations = 0
    last_check: CheckFigures | None = None
    last_check_of = ""
    retries_by_activity: dict[str, int] = defaultdict(int)

    def lane(name: str) -> LaneFigures:
        return lanes.setdefault(name, LaneFigures(lane=name))

    for e in lines:
        event, ts = e["event"], float(e["ts"])
        if e.get("attempt", 1) > 1:
            retries_by_activity[f"{e.get('workflow_id')}/{e.get('activity_id')}"] = e["attempt"] - 1
        if event == "helper_spawn":
            lane(e["lane"]).dispatches += 1
            opened[(e["lane"], e.get("workflow_id", ""))] = (ts, int(e.get("round") or 1))
        elif event == "lane_end":
            began = opened.pop((e["lane"], e.get("workflow_id", "")), None)
            if began is not None:
                lane(e["lane"]).seconds += ts - began[0]
                spans[began[1]].append((began[0], ts, e["lane"]))
        elif event == "model_call" and e.get("agent") not in ("planner", "converger", "cache"):
            f = lane(e["agent"])
            f.model_calls += 1
            f.tokens_in += e.get("input_tokens") or 0
            f.tokens_out += e.get("output_tokens") or 0
            f.cost_usd += e.get("cost_usd") or 0.0
            f.cache_read_tokens += e.get("cache_read_tokens") or 0
        elif event == "tool_call":
            f = lane(e["lane"])
            f.tool_calls += 1
            f.refusals += e.get("outcome") == "refused"
            f.tool_errors += e.get("outcome") == "error"
        elif event == "merge":
            first_merge.setdefault(e["lane"], bool(e.get("merged")))
            changesets += bool(e.get("merged"))
        elif event == "resolution":
            resolutions += 1
            changesets += bool(e.get("resolved"))
        elif event == "validation" and e.get("label") != "baseline" and not e.get("moved_from"):
            one = CheckFigures(
                passed=bool(e.get("passed")), tests_run=e.get("tests_run"), base_tests_run=e.get("base_tests_run"),
                new_failures=len(e.get("failures") or []), pre_existing=len(e.get("pre_existing") or []),
                fixed=len(e.get("fixed") or []), flaky=len(e.get("flaky") or []), problems=e.get("problems") or [],
                verdict=e.get("verdict") or "", test_changes=e.get("test_changes") or [],
                selection=e.get("selection") or "", times=_times(e.get("times")), second_run=e.get("second_run") or "",
                second_run_tests=e.get("second_run_tests"))
            # (a check's parts, its shards and its remainder, are one check: docs/scale.md)
            same = last_check is not None and e.get("check") and e.get("check") == last_check_of
            validations += not same
            last_check = _joined(last_check, one) if same and last_check is not None else one
            last_check_of = e.get("check") or ""
    for key, n in retries_by_activity.items():
        lane_name = next((e.get("lane") or e.get("agent") for e in lines
                          if f"{e.get('workflow_id')}/{e.get('activity_id')}" == key), None)
        if lane_name in lanes:
            lanes[lane_name].retries = (lanes[lane_name].retries or 0) + n

    times = [float(e["ts"]) for e in lines]
    elapsed = (max(times) - min(times)) if times else 0.0
    rounds = []
    for round_no, round_spans in sorted(spans.items()):
        running = _union([(start, end) for start, end, _ in round_spans])
        busy = sum(end - start for start, end, _ in round_spans)
        n = len({name for _, _, name in round_spans})
        rounds.append(RoundFigures(round=round_no, lanes=n, lanes_s=round(running, 3), busy_s=round(busy, 3),
                                   parallel_efficiency=round(busy / (n * running), 3) if running > 0 else None))
    model_lines = [e for e in lines if e["event"] == "model_call"]
    return RunReport(
        run_id=run_id, elapsed_s=round(elapsed, 3), changesets=changesets,
        changesets_per_hour=round(changesets / (elapsed / 3600), 2) if elapsed > 0 else 0.0,
        parallel_efficiency=_pooled(rounds),
        first_pass_merge_rate=round(sum(first_merge.values()) / len(first_merge), 3) if first_merge else None,
        tokens_in=sum(e.get("input_tokens") or 0 for e in model_lines),
        tokens_out=sum(e.get("output_tokens") or 0 for e in model_lines),
        cost_usd=round(sum(e.get("cost_usd") or 0.0 for e in model_lines), 6),
        cache_read_tokens=sum(e.get("cache_read_tokens") or 0 for e in model_lines),
        cache_write_tokens=sum(e.get("cache_write_tokens") or 0 for e in model_lines),
        uncached_cost_usd=round(sum(e.get("uncached_cost_usd") or 0.0 for e in model_lines), 6),
        tool_calls=sum(f.tool_calls for f in lanes.values()), refusals=sum(f.refusals for f in lanes.values()),
        retries=sum(retries_by_activity.values()), validations=validations, resolutions=resolutions,
        lanes=[f.model_copy(update={"seconds": round(f.seconds, 3), "cost_usd": round(f.cost_usd, 6)})
               for f in lanes.values()],
        last_check=last_check, tool_errors=sum(f.tool_errors for f in lanes.values()), rounds=rounds,
        model_calls=sum(f.model_calls for f in lanes.values()),
        rollbacks=sum(1 for e in lines if e["event"] == "rollback"),
    )


def _times(value: Any) -> dict[str, float]:
    """A ledger line's times, as numbers only (a line written by hand, or before times, gives {})."""
    if not isinstance(value, dict):
        return {}
    return {str(k): float(v) for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool)}


TIME_PARTS = (("tree_s", "tree"), ("sandbox_s", "sandbox"), ("setup_s", "setup"), ("commands_s", "commands"),
              ("second_run_s", "second run"), ("results_s", "results"))


def time_line(c: CheckFigures) -> str:
    """"gate time 41.2s: tree 1.1s, sandbox 0.4s, ..., 1.62x its commands": where the check's time went."""
    if not c.times.get("total_s"):
        return ""
    parts = ", ".join(f"{name} {c.times.get(key, 0.0):.1f}s" for key, name in TIME_PARTS)
    commands = c.times.get("commands_s", 0.0)
    ratio = f"; {c.times['total_s'] / commands:.2f}x its commands" if commands > 0 else ""
    return f"gate time {c.times['total_s']:.1f}s: {parts}{ratio}"


def _union(spans: list[tuple[float, float]]) -> float:
    """How long at least one of the spans was open: the time lanes were running."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


def render(r: RunReport) -> str:
    eff = "-" if r.parallel_efficiency is None else f"{r.parallel_efficiency:.2f}"
    fpm = "-" if r.first_pass_merge_rate is None else f"{r.first_pass_merge_rate:.0%}"
    retries = "" if r.retries is None else f"{r.retries} retries, "
    out = [f"run {r.run_id}: {r.elapsed_s:.1f}s, {r.changesets} changesets ({r.changesets_per_hour:.1f}/hour), "
           f"parallel efficiency {eff} (lane-running time only), first-pass merge rate {fpm}",
           f"{r.model_calls} model calls, tokens {r.tokens_in} in / {r.tokens_out} out, ${r.cost_usd:.4f}; "
           f"{r.tool_calls} tool calls, {r.refusals} refused, {r.tool_errors} failed, {retries}{r.validations} "
           f"validations, {r.rollbacks} rollbacks, {r.resolutions} resolutions"]
    cache = cache_line(Usage(input_tokens=r.tokens_in, cache_read_tokens=r.cache_read_tokens,
                             cache_write_tokens=r.cache_write_tokens, cost_usd=r.cost_usd,
                             uncached_cost_usd=r.uncached_cost_usd))
    if cache:
        out.append(f"prompt {cache}")
    if r.base_moved:
        out.append(f"base moved: {r.base_moved}")
    out.append("")
    if r.rounds:
        out += [f"{'round':>5} {'lanes':>5} {'lanes ran':>9} {'lane time':>9} {'efficiency':>10} {'merged':>6} "
                f"{'rollbacks':>9}  decision"]
        for rf in r.rounds:
            e = "-" if rf.parallel_efficiency is None else f"{rf.parallel_efficiency:.2f}"
            out.append(f"{rf.round:>5} {rf.lanes:>5} {rf.lanes_s:>8.1f}s {rf.busy_s:>8.1f}s {e:>10} {rf.merged:>6} "
                       f"{rf.rollbacks:>9}  {rf.decision}")
        out.append("")
    out.append(f"{'lane':<16} {'runs':>4} {'seconds':>8} {'calls':>6} {'tokens in':>10} {'cached':>6} {'out':>8} "
               f"{'cost':>9} {'tools':>6} {'refused':>7} {'failed':>6} {'retries':>7}")
    for f in r.lanes:
        cached = f"{f.cache_read_tokens / f.tokens_in:.0%}" if f.tokens_in else "-"
        out.append(f"{f.lane:<16} {f.dispatches:>4} {f.seconds:>8.1f} {f.model_calls:>6} {f.tokens_in:>10} "
                   f"{cached:>6} {f.tokens_out:>8} {f.cost_usd:>9.4f} {f.tool_calls:>6} {f.refusals:>7} "
                   f"{f.tool_errors:>6} {_n(f.retries):>7}")
    if (c := r.last_check) is not None:
        ran = "" if c.tests_run is None else f"; tests run {c.base_tests_run if c.base_tests_run is not None else '?'}" \
            f" on the base -> {c.tests_run} merged"
        said = f" ({c.selection})" if c.selection else ""
        out += ["", f"last check: {c.verdict or ('PASSED' if c.passed else 'FAILED')}{said}: {c.new_failures} new failure(s), "
                    f"{c.pre_existing} pre-existing, {c.fixed} fixed, {c.flaky} flaky{ran}",
                *[f"  problem: {p}" for p in c.problems], *[f"  test change: {t}" for t in c.test_changes]]
        if line := time_line(c):
            out.append(f"  {line}")
        if c.second_run_tests is not None:
            said = f" ({c.second_run})" if c.second_run else ""
            out.append(f"  second run (the base commit's tests against the merged code): {c.second_run_tests} "
                       f"test{'' if c.second_run_tests == 1 else 's'}{said}")
    if r.source == "server":
        out += ["", "from the run's record on the Temporal server; retries per lane: report --home on a worker host"]
    elif r.source == "server+ledger":
        out += ["", f"from the run's record on the Temporal server (as report shows it); from this host's ledger: "
                    f"{', '.join(r.from_ledger)}"]
    else:
        out += ["", r.note or "from this host's ledger alone (the server has no record of the run): it counts every "
                "attempt of a model call, each merge of a lane, and no finish call"]
    return "\n".join(out)

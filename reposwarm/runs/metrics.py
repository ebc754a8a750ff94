"""The swarm's numbers, computed from a run's ledger alone.

changesets per hour: lanes merged (cleanly or by a resolution) per hour of the run;
parallel efficiency: serial lane time / (lanes x elapsed lane phase), as the reference design defines it;
first-pass merge rate: lanes whose first merge had no conflict / lanes merged or conflicted.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pydantic import BaseModel


class LaneFigures(BaseModel):
    lane: str
    dispatches: int = 0
    seconds: float = 0.0
    model_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    refusals: int = 0
    retries: int = 0


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
    retries: int
    validations: int
    resolutions: int
    lanes: list[LaneFigures]
    last_check: CheckFigures | None = None


def report(run_id: str, lines: list[dict[str, Any]]) -> RunReport:
    lanes: dict[str, LaneFigures] = {}
    spans: list[tuple[float, float]] = []
    opened: dict[tuple[str, str], float] = {}
    first_merge: dict[str, bool] = {}
    changesets = resolutions = validations = 0
    last_check: CheckFigures | None = None
    retries_by_activity: dict[str, int] = defaultdict(int)

    def lane(name: str) -> LaneFigures:
        return lanes.setdefault(name, LaneFigures(lane=name))

    for e in lines:
        event, ts = e["event"], float(e["ts"])
        if e.get("attempt", 1) > 1:
            retries_by_activity[f"{e.get('workflow_id')}/{e.get('activity_id')}"] = e["attempt"] - 1
        if event == "helper_spawn":
            lane(e["lane"]).dispatches += 1
            opened[(e["lane"], e.get("workflow_id", ""))] = ts
        elif event == "lane_end":
            start = opened.pop((e["lane"], e.get("workflow_id", "")), None)
            if start is not None:
                lane(e["lane"]).seconds += ts - start
                spans.append((start, ts))
        elif event == "model_call" and e.get("agent") not in ("planner", "converger"):
            f = lane(e["agent"])
            f.model_calls += 1
            f.tokens_in += e.get("input_tokens") or 0
            f.tokens_out += e.get("output_tokens") or 0
            f.cost_usd += e.get("cost_usd") or 0.0
        elif event == "tool_call":
            f = lane(e["lane"])
            f.tool_calls += 1
            f.refusals += e.get("outcome") == "refused"
        elif event == "merge":
            first_merge.setdefault(e["lane"], bool(e.get("merged")))
            changesets += bool(e.get("merged"))
        elif event == "resolution":
            resolutions += 1
            changesets += bool(e.get("resolved"))
        elif event == "validation" and e.get("label") != "baseline":
            validations += 1
            last_check = CheckFigures(
                passed=bool(e.get("passed")), tests_run=e.get("tests_run"), base_tests_run=e.get("base_tests_run"),
                new_failures=len(e.get("failures") or []), pre_existing=len(e.get("pre_existing") or []),
                fixed=len(e.get("fixed") or []), flaky=len(e.get("flaky") or []), problems=e.get("problems") or [])
    for key, n in retries_by_activity.items():
        lane_name = next((e.get("lane") or e.get("agent") for e in lines
                          if f"{e.get('workflow_id')}/{e.get('activity_id')}" == key), None)
        if lane_name in lanes:
            lanes[lane_name].retries += n

    times = [float(e["ts"]) for e in lines]
    elapsed = (max(times) - min(times)) if times else 0.0
    efficiency = None
    if spans:
        phase = max(end for _, end in spans) - min(start for start, _ in spans)
        busy = sum(end - start for start, end in spans)
        efficiency = round(busy / (len(lanes) * phase), 3) if phase > 0 and lanes else None
    model_lines = [e for e in lines if e["event"] == "model_call"]
    return RunReport(
        run_id=run_id, elapsed_s=round(elapsed, 3), changesets=changesets,
        changesets_per_hour=round(changesets / (elapsed / 3600), 2) if elapsed > 0 else 0.0,
        parallel_efficiency=efficiency,
        first_pass_merge_rate=round(sum(first_merge.values()) / len(first_merge), 3) if first_merge else None,
        tokens_in=sum(e.get("input_tokens") or 0 for e in model_lines),
        tokens_out=sum(e.get("output_tokens") or 0 for e in model_lines),
        cost_usd=round(sum(e.get("cost_usd") or 0.0 for e in model_lines), 6),
        tool_calls=sum(f.tool_calls for f in lanes.values()), refusals=sum(f.refusals for f in lanes.values()),
        retries=sum(retries_by_activity.values()), validations=validations, resolutions=resolutions,
        lanes=[f.model_copy(update={"seconds": round(f.seconds, 3), "cost_usd": round(f.cost_usd, 6)})
               for f in lanes.values()],
        last_check=last_check,
    )


def render(r: RunReport) -> str:
    eff = "-" if r.parallel_efficiency is None else f"{r.parallel_efficiency:.2f}"
    fpm = "-" if r.first_pass_merge_rate is None else f"{r.first_pass_merge_rate:.0%}"
    out = [f"run {r.run_id}: {r.elapsed_s:.1f}s, {r.changesets} changesets ({r.changesets_per_hour:.1f}/hour), "
           f"parallel efficiency {eff}, first-pass merge rate {fpm}",
           f"tokens {r.tokens_in} in / {r.tokens_out} out, ${r.cost_usd:.4f}; {r.tool_calls} tool calls, "
           f"{r.refusals} refused, {r.retries} retries, {r.validations} validations, {r.resolutions} resolutions", "",
           f"{'lane':<16} {'runs':>4} {'seconds':>8} {'calls':>6} {'tokens in':>10} {'out':>8} {'cost':>9} "
           f"{'tools':>6} {'refused':>7} {'retries':>7}"]
    for f in r.lanes:
        out.append(f"{f.lane:<16} {f.dispatches:>4} {f.seconds:>8.1f} {f.model_calls:>6} {f.tokens_in:>10} "
                   f"{f.tokens_out:>8} {f.cost_usd:>9.4f} {f.tool_calls:>6} {f.refusals:>7} {f.retries:>7}")
    if (c := r.last_check) is not None:
        ran = "" if c.tests_run is None else f"; tests run {c.base_tests_run if c.base_tests_run is not None else '?'}" \
            f" on the base -> {c.tests_run} merged"
        out += ["", f"last check: {'passed' if c.passed else 'FAILED'}: {c.new_failures} new failure(s), "
                    f"{c.pre_existing} pre-existing, {c.fixed} fixed, {c.flaky} flaky{ran}",
                *[f"  problem: {p}" for p in c.problems]]
    return "\n".join(out)

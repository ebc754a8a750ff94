"""The review package as Markdown, for the person who approves or rejects, and the run's status as text.

The Markdown opens with the verdict and the next step in one line, then the diff's size and where to read it
whole; a lane's figures are its whole round (its first pass and every repair), each pass listed too; the cost is
the run's so far as status has it, beside the round's own lanes'.
"""

from __future__ import annotations

import re

from reposwarm.checks import exercised, verdicts
from reposwarm.contracts import (
    LaneReview,
    Published,
    ReviewPackage,
    SwarmStatus,
    TestChange,
    TestFailure,
    TestReport,
    Verdict,
)
from reposwarm.contracts.cost import usage_line
from reposwarm.text import error_line, inert, inert_line
from reposwarm.vcs.branches import integration_branch

FAILED_CALLS_SHOWN = 10  # per lane in the Markdown; the --json package keeps the lane's whole list
BACKTICK, QUOTE = "`", "'"  # a command is shown as code: a backtick in it would end the span
TAIL_LINES = 15  # of a failing command's output, in the Markdown (the --json package and its log keep more)
DIFF_LINES, DIFF_BYTES, DIFF_LINE_CHARS = 400, 40_000, 1_000  # the diff the package holds (the whole: git diff)


def bounded_diff(text: str) -> tuple[str, int, bool]:
    """The diff as the package holds it: its first DIFF_LINES lines within DIFF_BYTES, a very long line cut; with
    the whole diff's line count, and whether this is less than all of it."""
    lines = text.splitlines()
    kept: list[str] = []
    size = 0
    for line in lines[:DIFF_LINES]:
        line = inert(line)
        if len(line) > DIFF_LINE_CHARS:
            line = line[:DIFF_LINE_CHARS] + " [line cut]"
        size += len(line.encode("utf-8")) + 1
        if size > DIFF_BYTES:
            break
        kept.append(line)
    return "\n".join(kept) + ("\n" if kept else ""), len(lines), len(kept) < len(lines)


def with_published(pkg: ReviewPackage, published: Published) -> ReviewPackage:
    """The package with what publishing it read from git: the diff, what changed since the last round, and which
    lanes the merged tree holds (the round's merges counted from that). The activity renders this very package,
    and the workflow keeps it (workflows/review.py reviewed)."""
    update: dict = {"since_last_round": published.since_last_round, "diff": published.diff,
                    "diff_lines": published.diff_lines, "diff_truncated": published.diff_truncated}
    if published.tree_checked:
        gone = set(published.not_in_tree)
        lanes = [ln.model_copy(update={"in_tree": f"{ln.lane}@{ln.round}" not in gone}) if ln.head_sha else ln
                 for ln in pkg.lanes]
        update["lanes"] = [ln for ln in lanes if ln.round in (0, pkg.round) or ln.in_tree is not False]
        update["merged"] = 0 if pkg.nothing_merged else sum(
            1 for ln in lanes if ln.round in (0, pkg.round) and ln.state.startswith("merged") and ln.in_tree is not False)
    return pkg.model_copy(update=update)


def _n_lanes(n: int) -> str:
    return f"{n} lane{'' if n == 1 else 's'}"


def verdict_line(pkg: ReviewPackage, prog: str = "reposwarm") -> str:
    """The round in one line: the checks' verdict, what merged, and the next step (the commands to send it)."""
    run, report = pkg.run_id, pkg.test_report
    reject = f'reject: {prog} reject {run} --comment "..."'
    if pkg.planning_error:
        reject += " (the next plan failed once: see below)"
    if pkg.nothing_merged:
        return f"Verdict: nothing merged in round {pkg.round}, nothing to approve — {reject} to plan again"
    merged = pkg.merged if pkg.merged is not None else sum(ln.state.startswith("merged") for ln in pkg.lanes
                                                           if ln.round in (0, pkg.round))
    earlier = sum(1 for ln in pkg.lanes if ln.round not in (0, pkg.round))
    what = _n_lanes(merged) + " merged" + (f" (and {_n_lanes(earlier)} from earlier rounds)" if earlier else "")
    rolled = f", {pkg.rollbacks} rollback(s)" if pkg.rollbacks else ""
    if report is None:
        return f"Verdict: no checks configured, {what}{rolled} — approve: {prog} approve {run}, or {reject}"
    verdict = report.verdict_of
    flag = {Verdict.failed: " --accept-red", Verdict.passed_with_test_changes: " --accept-test-changes",
            Verdict.not_judged: " --accept-unjudged"}.get(verdict, "")
    anyway = " anyway" if verdict in (Verdict.failed, Verdict.not_judged) else ""
    some = " (not the whole profile: see Checks)" if verdicts.selected(report) else ""
    return (f"Verdict: checks {verdict}{some}, {what}{rolled} — approve{anyway}: {prog} approve {run}{flag}, "
            f"or {reject}")


def diff_command(pkg: ReviewPackage) -> str:
    """The command that shows the whole change: the base commit against the integration branch."""
    branch = pkg.integration_branch or integration_branch(pkg.run_id)
    if "://" in pkg.repo_path or pkg.repo_path.startswith("git@"):
        return f"git fetch {pkg.repo_path} {branch} && git diff {pkg.base_sha[:12]} FETCH_HEAD"
    return f"git -C {pkg.repo_path} diff {pkg.base_sha[:12]} {branch}"


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in `text`: the text cannot close it."""
    return "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))


def render_review(pkg: ReviewPackage, ui_url: str = "") -> str:
    out = [f"# Review: {pkg.run_id} (round {pkg.round})", "", verdict_line(pkg), "", f"**Task:** {pkg.task}", "",
           f"Repository `{pkg.repo_path}`, base `{pkg.base_sha[:12]}`, merged tree `{pkg.integration_sha[:12]}`"]
    if pkg.diff or pkg.diff_lines:
        out.append(f"Diff: {pkg.diff_lines} lines" + (", the first of them under **Diff** below" if pkg.diff_truncated
                                                      else ", under **Diff** below") + f"; whole: `{diff_command(pkg)}`")
    if ui_url:
        out.append(f"Web UI: {ui_url}")
    out += [f"\n**Warning:** {w}" for w in pkg.warnings]
    if pkg.base_moved:
        out += ["", f"**The base moved:** {pkg.base_moved}"]
    if pkg.planning_error:
        out += ["", f"**{error_line(pkg.planning_error, 600)}**"]
    if pkg.nothing_merged:
        out += ["", "**Nothing merged** in this round: no lane's work reached the merged tree, so there is "
                "nothing to approve. Reject with a comment to plan again."]
    if pkg.previous_comments:
        out += ["", "## Earlier review comments", *[f"- {c}" for c in pkg.previous_comments]]
    if pkg.round > 1:
        out += ["", "## What changed since the last round", "", "```",
                (pkg.since_last_round or "nothing").rstrip(), "```"]
    out += ["", "## Plan", "", pkg.plan.summary or "", "", "### Interface contract", "", "```",
            pkg.plan.interface_contract.rstrip(), "```"]
    current = [ln for ln in pkg.lanes if ln.round in (0, pkg.round)]
    earlier = [ln for ln in pkg.lanes if ln.round not in (0, pkg.round)]
    out += ["", "## Lanes", ""]
    if earlier:
        out += [f"Approving delivers every lane below: this round's {len(current)}, and {len(earlier)} from earlier "
                "rounds whose work the merged tree still holds.", ""]
    for lane in current + earlier:
        out += _lane(pkg, lane)
    out += ["## Merging", ""]
    if pkg.merged is not None:
        out.append(f"Merged into the tree this round: {_n_lanes(pkg.merged)}"
                   + (f"; {pkg.rollbacks} rollback(s) to the last green state" if pkg.rollbacks else ""))
    if pkg.first_pass_merge_rate is not None:
        undone = " (merges a rollback then undid)" if pkg.rollbacks or pkg.nothing_merged else ""
        out.append(f"First-pass merge rate: {pkg.first_pass_merge_rate:.0%} of lanes merged with no conflict{undone}")
    if pkg.overlaps:
        out += ["", "Files touched by more than one lane:"]
        out += [f"- `{o.path}`: {', '.join(o.lanes)}" for o in pkg.overlaps]
    if pkg.resolutions:
        out += ["", "Conflicts and how they were settled:", *[f"- {r}" for r in pkg.resolutions]]
    if pkg.conflicts:
        out += ["", "**Unresolved conflicts** (nothing of either side dropped; the lane's branch is kept):"]
        out += [f"- {c}" for c in pkg.conflicts]
    if pkg.contract_flags:
        out += ["", "**Interface contract changed** by a lane whose goal did not ask for it:"]
        out += [f"- {f}" for f in pkg.contract_flags]
    out.append("")
    if pkg.test_report is not None and pkg.test_report.test_changes:
        out += test_changes_section(pkg.test_report)
    out += ["## Checks", ""]
    report = pkg.test_report
    if report is None:
        out.append("No check profile is configured: nothing was run.")
    else:
        out += _checks(pkg, report)
    if pkg.validations:
        out += ["", "Validation history:", *[f"- {v}" for v in pkg.validations]]
    out += _diff(pkg)
    u, r = pkg.usage, pkg.round_usage
    out += ["", "## Cost", "", f"The run so far (as `status` shows it: planning, lanes and converger): {usage_line(u)}"]
    if r.model_calls:
        out += ["", f"This round's lanes, every pass: {usage_line(r)}"]
    return "\n".join(out) + "\n"


def _lane(pkg: ReviewPackage, lane: LaneReview) -> list[str]:
    u = lane.usage
    where = f" (round {lane.round})" if lane.round not in (0, pkg.round) else ""
    state = lane.state or lane.status.value
    gone = " — **not in the merged tree** (rolled back)" if lane.in_tree is False else ""
    out = [f"### {lane.lane}{where}: {state}" + (f" ({error_line(lane.reason)})" if lane.reason else "") + gone, ""]
    if lane.agent != "builtin":  # an outside agent did the lane's work (docs/agents.md)
        out += [f"Agent: {lane.agent}", ""]
    out += [f"**Flag:** {flag}\n" for flag in lane.flags]
    passes = f" in {len(lane.passes)} passes" if len(lane.passes) > 1 else ""
    out += [f"Goal: {lane.goal}", "", f"Summary: {lane.summary or '-'}", "",
            f"{lane.turns} turns, {lane.tool_calls} tool calls, {lane.refusals} refused, {lane.tool_errors} failed, "
            f"{len(lane.edits)} files, {usage_line(u)}, {lane.elapsed_s:.1f}s{passes}", ""]
    if len(lane.passes) > 1:
        for i, one in enumerate(lane.passes):
            name = "first pass" if i == 0 else f"repair {i}"
            files = ", ".join(f"`{e.path}`" for e in one.edits) or "no file"
            out.append(f"- {name}: {one.turns} turns, {one.tool_calls} tool calls, {len(one.edits)} files "
                       f"({files}), {one.usage.model_calls} model calls"
                       + (f", {one.status.value}" if one.status is not None else ""))
        out.append("")
    out += _failed_calls(lane)
    if lane.commands:  # what it ran with the `run` tool, and how each ended ("... and 3 more" last)
        out += ["Commands it ran:", *[f"  - `{c.replace(BACKTICK, QUOTE)}`" if c.startswith("$ ") else f"  - {c}"
                                      for c in lane.commands], ""]
    if lane.edits:
        out += ["| file | change | reason |", "|---|---|---|"]
        out += [f"| `{e.path}` | {e.operation} | {e.reason.replace('|', '/')} |" for e in lane.edits]
        out.append("")
    if lane.diff_stat:
        out += ["```", lane.diff_stat.rstrip(), "```", ""]
    if lane.assumptions:
        out += ["Assumptions (not verified):", *[f"- {a}" for a in lane.assumptions], ""]
    out += _lane_exercise(pkg, lane)
    return out


def _lane_exercise(pkg: ReviewPackage, lane: LaneReview) -> list[str]:
    """Whether the checks ran this lane's changed files (reposwarm/checks/exercised.py): those loaded from outside
    the tree, those no check loaded, and the changed lines that ran where measured."""
    if pkg.test_report is None:
        return []
    outside, missing, coverage = exercised.of_files(pkg.test_report, (e.path for e in lane.edits))
    out = [f"- **Not judged:** `{_code(path)}` was loaded from `{_code(where)}`, not from the tree"
           for path, where in outside.items()]
    out += [f"- {exercised.NOT_EXERCISED}: `{_code(path)}`" for path in missing]
    out += [f"- diff coverage: `{_code(path)}`: {ran} of {changed} changed lines ran"
            for path, (ran, changed) in coverage.items()]
    return out + [""] if out else []


def _code(text: str) -> str:
    """A path or a place shown as code in the Markdown: one line, no backtick to end the span."""
    return inert_line(text).replace(BACKTICK, QUOTE)[:300]


def _diff(pkg: ReviewPackage) -> list[str]:
    command = diff_command(pkg)
    if not pkg.diff:
        what = "no change" if pkg.diff_lines == 0 and pkg.base_sha == pkg.integration_sha else "not in this package"
        return ["", "## Diff", "", f"The diff is {what}; the whole one: `{command}`"]
    shown = pkg.diff.count("\n")
    size = (f"the first {shown} of its {pkg.diff_lines} lines (the whole diff: `{command}`)" if pkg.diff_truncated
            else f"all {pkg.diff_lines} lines (also: `{command}`)")
    fence = _fence(pkg.diff)
    return ["", "## Diff", "", f"Base `{pkg.base_sha[:12]}` to the merged tree `{pkg.integration_sha[:12]}`: {size}"
            + (", the base's own new commits included" if pkg.base_moved else "") + ".", "",
            f"{fence}diff", pkg.diff.rstrip("\n"), fence]


def render_status(status: SwarmStatus) -> str:
    """The run as `status`, `watch` and `demo` print it. A lane that ran shows its whole round from the round's
    record (its first pass and every repair), as the review does; a running one its live progress."""
    lines = [f"run {status.run_id}: {status.phase.value} (round {status.round})", f"repo {status.repo_path}"]
    if status.provider_wait:
        lines.append(error_line(status.provider_wait, 400))
    lines += [pause.line(status.run_id) for pause in status.paused]
    lines += [f"WARNING: {w}" for w in status.warnings]
    if status.queued_decision:
        lines.append(f"a decision is queued: {status.queued_decision}; it applies when a worker runs")
    if status.review is not None and status.review.nothing_merged and status.phase.value == "review":
        lines.append("nothing merged in this round: approving is refused; reject with a comment to plan again")
    if status.base_moved:
        lines.append(f"base moved: {status.base_moved}")
    if status.proposal is not None:  # a run with no lanes file: the lanes it proposed (reposwarm/lanes/proposal_file.py)
        from reposwarm.lanes.proposal_file import render_proposal

        lines.append(render_proposal(status.proposal))
    record = next((r for r in reversed(status.rounds) if r.round == status.round), None)
    for lane in status.lanes:
        found = next((ln for ln in record.lanes if ln.lane == lane.lane), None) if record is not None else None
        if found is not None and found.passes and lane.state != "running":
            files = {e.path for one in found.passes for e in one.edits}
            passes = f" in {len(found.passes)} passes" if len(found.passes) > 1 else ""
            cache = f", {found.usage.cache_hit_share:.0%} cached" if found.usage.cache_read_tokens else ""
            extra = (f"{found.turns} turns, {found.tool_calls} tool calls, {len(files)} files, "
                     f"{found.usage.total_tokens} tokens{cache}, ${found.usage.cost_usd:.4f}{passes}")
        else:
            cached = f" ({lane.cache_read_tokens:,} from the cache)" if lane.cache_read_tokens else ""
            extra = (f"{lane.turns} turns, {lane.tool_calls} tool calls, {lane.tokens} tokens{cached}, "
                     f"${lane.cost_usd:.4f}" if lane.turns else "")
        reason = f" - {error_line(lane.reason)}" if lane.reason else ""
        agent = f"agent {lane.agent}, " if lane.agent and lane.agent != "builtin" else ""
        lines.append(f"  {lane.lane:<16} {lane.state:<26} {agent}{extra}{reason}")
    if record is not None and (record.merged or record.rollbacks or status.phase.value == "review"):
        lines.append(f"merged this round: {record.merged} lane(s)"
                     + (f"; {record.rollbacks} rollback(s) to the last green state" if record.rollbacks else ""))
    if status.first_pass_merge_rate is not None:
        lines.append(f"first-pass merge rate: {status.first_pass_merge_rate:.0%}; "
                     f"{len(status.resolutions)} resolution(s), {len(status.overlaps)} overlapping file(s)")
    for flag in status.contract_flags:
        lines.append(f"contract flag: {flag}")
    u = status.usage
    if u.model_calls:
        lines.append(f"usage: {usage_line(u)}")
    if status.test_report is not None:
        lines.append(f"checks: {verdicts.summary(status.test_report)}")
        lines += [f"  {p}" for p in status.test_report.problems]
        lines += [f"  {line}" for line in exercised.lines(status.test_report)]
        lines += [f"  test change: {_change_line(c)}" for c in status.test_report.test_changes[:20]]
    if status.delivered_branch:
        lines.append(f"delivered: {status.delivered_branch}")
    if status.error:
        lines.append(f"error: {error_line(status.error, 600)}")
    for why in status.ignored_signals:
        lines.append(f"ignored review signal: {error_line(why)}")
    return "\n".join(lines)


def _failed_calls(lane: LaneReview) -> list[str]:
    """The lane's failed and refused calls, the first few: an edit that did not apply is work the summary may
    still claim."""
    if not lane.failed_calls:
        return []
    shown = lane.failed_calls[:FAILED_CALLS_SHOWN]
    out = ["Failed or refused calls:", *[f"  - {line}" for line in shown]]
    hidden = lane.tool_errors + lane.refusals - len(shown)
    if len(lane.failed_calls) > len(shown) and hidden > 0:
        out.append(f"  - ... {hidden} more")
    return out + [""]


def _owners(pkg: ReviewPackage, failure: TestFailure) -> list[str]:
    """Lanes that changed the failing test's file or a file its message (the traceback) names."""
    text = f"{failure.file or ''}\n{failure.message}"
    return [lane.lane for lane in pkg.lanes if any(e.path in text for e in lane.edits)]


def _checks(pkg: ReviewPackage, report: TestReport) -> list[str]:
    """The check at a glance: the verdict, the test delta against the base commit, then the details."""
    # (the summary opens with the verdict word, said here in bold already)
    rest = verdicts.summary(report).removeprefix(report.verdict_of.value).lstrip(":; ")
    out = [f"**{report.verdict_of}** in {report.duration_s:.1f}s (on `{report.ref[:12]}`)"
           + (f": {rest}" if rest else ""), ""]
    if report.verdict_of == Verdict.passed_with_test_changes:
        out += ["The checks pass only with the test changes listed under **Test changes** above: approve only if "
                "each is right.", ""]
    out += _exercise(report)
    if verdicts.selected(report):
        out += [f"**Not the whole profile**: {report.selection}. The tests the changes do not reach did not run "
                "(the profile's `full_at` says when they do: docs/scale.md).", ""]
    out += [f"- not run: {line}" for line in report.skipped]
    out += [""] if report.skipped else []
    if report.base_tests_s is not None:
        out += [f"Test paths changed ({report.base_tests_paths}), so the base commit's tests also ran against the "
                f"merged code: a second run, {report.base_tests_s:.1f}s"
                + (f", {report.second_run_tests} tests" if report.second_run_tests is not None else "")
                + (f" ({report.second_run})" if report.second_run else "") + ".", ""]
    if report.tests_run is not None or report.base_tests_run is not None:
        def n(value: int | None) -> str:
            return "-" if value is None else str(value)
        out += ["| | base commit | merged tree |", "|---|---|---|",
                f"| tests run | {n(report.base_tests_run)} | {n(report.tests_run)} |",
                f"| new failures | | {len(report.failures)} |",
                f"| fixed | | {len(report.fixed)} |",
                f"| pre-existing (failing on both) | {len(report.pre_existing)} | {len(report.pre_existing)} |",
                f"| flaky | | {len(report.flaky)} |", ""]
    if report.problems:
        out += ["Why it cannot pass:", *[f"- {p}" for p in report.problems], ""]
    if report.setup:  # the profile's setup step (ran, or restored from the host's cache) or the checkout's folders
        out += ["Dependencies:", *[f"- {inert(line)}" for line in report.setup], ""]
    for cmd in report.commands:
        state = "timed out" if cmd.timed_out else f"exit {cmd.exit_code}"
        runner = f"{cmd.runner}, " if cmd.runner else ""
        ran = f", {cmd.tests_run} tests" if cmd.tests_run is not None else ""
        why = f" **{cmd.reason}**" if cmd.reason else ""
        out.append(f"- `{' '.join(cmd.argv)}`:{why} {state} ({runner}{cmd.exit_class or '?'}{ran}, "
                   f"{cmd.duration_s:.1f}s)")
        if cmd.exit_code != 0 and cmd.output_tail.strip():  # what a failing command said last, bounded
            tail = inert(cmd.output_tail).rstrip().splitlines()[-TAIL_LINES:]
            out += ["", "  ~~~", *[f"  {line[:200]}".replace("~~~", "~ ~ ~") for line in tail], "  ~~~", ""]
    if report.failures:
        out += ["", "New failures:"]
        for f in report.failures:
            first = next((line.strip() for line in f.message.splitlines() if line.strip()), "")
            owners = _owners(pkg, f)
            out.append(f"- {f.name}" + (f" (`{f.file}`)" if f.file else "")
                       + (f", lane {', '.join(owners)}" if owners else "") + (f": {first[:200]}" if first else ""))
    for title, items in (("Fixed (failing on the base commit, passing now)", report.fixed),
                         ("Pre-existing (failing on the base commit too; not blamed on the swarm)",
                          report.pre_existing),
                         ("Flaky (failed, then passed on an immediate re-run)", report.flaky)):
        if items:
            out += ["", f"{title}:"]
            out += [f"- {f.name}" + (f" (`{f.file}`)" if f.file else "") for f in items]
    return out


def _exercise(report: TestReport) -> list[str]:
    """Whether the checks ran the change's own code, for the Checks section: the NOT JUDGED reason and its fix, the
    count, the files no check loaded (each lane's are under the lane too), and what no runtime could speak for."""
    ex = report.exercise
    if ex is None:
        return []
    out: list[str] = []
    if ex.outside:
        out += [f"**Not judged: the checks ran another copy of the changed code.** {exercised.FIX[0].upper()}"
                f"{exercised.FIX[1:]}.", ""]
        out += [f"- `{_code(path)}` was loaded from `{_code(where)}`" for path, where in ex.outside.items()]
        out.append("")
    if ex.counted:
        out.append(f"Changed source files: {len(ex.loaded)} of {ex.counted} exercised"
                   + (f", {len(ex.not_loaded)} {exercised.NOT_EXERCISED}" if ex.not_loaded else "")
                   + (f", {len(ex.outside)} loaded from outside the tree" if ex.outside else "") + ".")
        out += [""] + [f"- {exercised.NOT_EXERCISED}: `{_code(path)}`" for path in ex.not_loaded] \
            if ex.not_loaded else []
        out.append("")
    if ex.unknown:
        out += [f"No runtime reported on {len(ex.unknown)} changed file(s) (another language, or data): "
                + ", ".join(f"`{_code(p)}`" for p in ex.unknown[:10]) + (" ..." if len(ex.unknown) > 10 else ""), ""]
    if ex.diff_lines:
        ran = sum(r for r, _ in ex.diff_lines.values())
        changed = sum(c for _, c in ex.diff_lines.values())
        out += [f"Diff coverage: {ran} of {changed} changed lines ran, in {len(ex.diff_lines)} file(s) (each lane's "
                "under Lanes).", ""]
    if ex.shadowed:
        first, where = next(iter(ex.shadowed.items()))
        out += [f"**Warning:** {len(ex.shadowed)} unchanged file(s) of the tree were also loaded from outside it "
                f"(`{_code(first)}` from `{_code(where)}`).", ""]
    return out


def _change_line(change: TestChange) -> str:
    lanes = f" (lane {', '.join(change.lanes)})" if change.lanes else ""
    return f"{change.kind}: {change.test}{lanes}: {change.detail}"


def test_changes_section(report: TestReport) -> list[str]:
    """Every lost, rewritten and reconfigured test, with the lanes that did it, their reason and the diff: what the
    gate would not call PASSED (issue 31)."""
    out = ["## Test changes", "",
           f"{len(report.test_changes)} change(s) to the tests that judge the merged code "
           f"({', '.join(verdicts.change_counts(report))}): none of them is plainly PASSED.", ""]
    for c in report.test_changes:
        where = f" (`{c.file}`)" if c.file and c.file != c.test else ""
        out += [f"### {c.kind}: {c.test}{where}", "",
                f"- lane(s): {', '.join(c.lanes) or 'not known'}",
                f"- reason given: {c.reason}" if c.reason else "- reason given: none (the lane's goal and finish "
                "summary do not say why)",
                f"- {c.detail}"]
        if c.command:
            out.append(f"- check: `{c.command}`")
        if c.diff:
            # a fence longer than any run of backticks in the diff: the lane's text cannot close it
            fence = _fence(c.diff)
            out += ["", f"{fence}diff", c.diff.rstrip(), fence]
        out.append("")
    return out

"""The review package as Markdown, for the person who approves or rejects."""

from __future__ import annotations

import re

from reposwarm.checks import verdicts
from reposwarm.contracts import LaneReview, ReviewPackage, SwarmStatus, TestChange, TestFailure, TestReport, Verdict
from reposwarm.text import inert

FAILED_CALLS_SHOWN = 10  # per lane in the Markdown; the --json package keeps the lane's whole list
TAIL_LINES = 15  # of a failing command's output, in the Markdown (the --json package and its log keep more)


def render_review(pkg: ReviewPackage, ui_url: str = "") -> str:
    out = [f"# Review: {pkg.run_id} (round {pkg.round})", "", f"**Task:** {pkg.task}", "",
           f"Repository `{pkg.repo_path}`, base `{pkg.base_sha[:12]}`, merged tree `{pkg.integration_sha[:12]}`"]
    if ui_url:
        out.append(f"Web UI: {ui_url}")
    out += [f"\n**Warning:** {w}" for w in pkg.warnings]
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
    out += ["", "## Lanes", ""]
    for lane in pkg.lanes:
        u = lane.usage
        out += [f"### {lane.lane}: {lane.status.value}" + (f" ({lane.reason})" if lane.reason else ""), ""]
        out += [f"**Flag:** {flag}\n" for flag in lane.flags]
        out += [f"Goal: {lane.goal}", "", f"Summary: {lane.summary or '-'}", "",
                f"{lane.turns} turns, {lane.tool_calls} tool calls, {lane.refusals} refused, {lane.tool_errors} failed, "
                f"{u.input_tokens} tokens in / {u.output_tokens} out, ${u.cost_usd:.4f}, {lane.elapsed_s:.1f}s", ""]
        out += _failed_calls(lane)
        if lane.edits:
            out += ["| file | change | reason |", "|---|---|---|"]
            out += [f"| `{e.path}` | {e.operation} | {e.reason.replace('|', '/')} |" for e in lane.edits]
            out.append("")
        if lane.diff_stat:
            out += ["```", lane.diff_stat.rstrip(), "```", ""]
        if lane.assumptions:
            out += ["Assumptions (not verified):", *[f"- {a}" for a in lane.assumptions], ""]
    out += ["## Merging", ""]
    if pkg.first_pass_merge_rate is not None:
        out.append(f"First-pass merge rate: {pkg.first_pass_merge_rate:.0%} of lanes merged with no conflict")
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
    u = pkg.usage
    out += ["", "## Cost", "", f"{u.model_calls} model calls, {u.input_tokens} tokens in / {u.output_tokens} out, "
            f"${u.cost_usd:.4f}"]
    return "\n".join(out) + "\n"


def render_status(status: SwarmStatus) -> str:
    lines = [f"run {status.run_id}: {status.phase.value} (round {status.round})", f"repo {status.repo_path}"]
    if status.provider_wait:
        lines.append(status.provider_wait)
    lines += [f"WARNING: {w}" for w in status.warnings]
    if status.review is not None and status.review.nothing_merged and status.phase.value == "review":
        lines.append("nothing merged in this round: approving is refused; reject with a comment to plan again")
    for lane in status.lanes:
        extra = (f"{lane.turns} turns, {lane.tool_calls} tool calls, {lane.tokens} tokens, ${lane.cost_usd:.4f}"
                 if lane.turns else "")
        reason = f" - {lane.reason}" if lane.reason else ""
        lines.append(f"  {lane.lane:<16} {lane.state:<26} {extra}{reason}")
    if status.first_pass_merge_rate is not None:
        lines.append(f"first-pass merge rate: {status.first_pass_merge_rate:.0%}; "
                     f"{len(status.resolutions)} resolution(s), {len(status.overlaps)} overlapping file(s)")
    for flag in status.contract_flags:
        lines.append(f"contract flag: {flag}")
    u = status.usage
    if u.model_calls:
        lines.append(f"usage: {u.model_calls} model calls, {u.input_tokens} tokens in / {u.output_tokens} out, "
                     f"${u.cost_usd:.4f}")
    if status.test_report is not None:
        lines.append(f"checks: {verdicts.summary(status.test_report)}")
        lines += [f"  {p}" for p in status.test_report.problems]
        lines += [f"  test change: {_change_line(c)}" for c in status.test_report.test_changes[:20]]
    if status.delivered_branch:
        lines.append(f"delivered: {status.delivered_branch}")
    if status.error:
        lines.append(f"error: {status.error}")
    for why in status.ignored_signals:
        lines.append(f"ignored review signal: {why}")
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
    rest = verdicts.summary(report).removeprefix(report.verdict_of.value).lstrip("; ")
    out = [f"**{report.verdict_of}** in {report.duration_s:.1f}s (on `{report.ref[:12]}`)"
           + (f": {rest}" if rest else ""), ""]
    if report.verdict_of == Verdict.passed_with_test_changes:
        out += ["The checks pass only with the test changes listed under **Test changes** above: approve only if "
                "each is right.", ""]
    if report.base_tests_s is not None:
        out += [f"Test paths changed ({report.base_tests_paths}), so the base commit's tests also ran against the "
                f"merged code: a second run of the profile, {report.base_tests_s:.1f}s.", ""]
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
            fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", c.diff)), default=0))
            out += ["", f"{fence}diff", c.diff.rstrip(), fence]
        out.append("")
    return out

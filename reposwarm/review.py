"""The review package as Markdown, for the person who approves or rejects."""

from __future__ import annotations

from reposwarm.contracts import ReviewPackage, SwarmStatus


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
        out += [f"### {lane.lane}: {lane.status.value}" + (f" ({lane.reason})" if lane.reason else ""), "",
                f"Goal: {lane.goal}", "", f"Summary: {lane.summary or '-'}", "",
                f"{lane.turns} turns, {lane.tool_calls} tool calls, {lane.refusals} refused, "
                f"{u.input_tokens} tokens in / {u.output_tokens} out, ${u.cost_usd:.4f}, {lane.elapsed_s:.1f}s", ""]
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
    out += ["## Checks", ""]
    report = pkg.test_report
    if report is None:
        out.append("No check profile is configured: nothing was run.")
    else:
        out.append(f"**{'PASSED' if report.passed else 'FAILED'}** in {report.duration_s:.1f}s "
                   f"(on `{report.ref[:12]}`)")
        for cmd in report.commands:
            state = "timed out" if cmd.timed_out else f"exit {cmd.exit_code}"
            out.append(f"- `{' '.join(cmd.argv)}`: {state} ({cmd.duration_s:.1f}s)")
        for title, items in (("New failures", report.failures), ("Pre-existing (failing on the base commit too; "
                             "not blamed on the swarm)", report.pre_existing),
                             ("Flaky (failed, then passed on an immediate re-run)", report.flaky)):
            if items:
                out += ["", f"{title}:"]
                out += [f"- {f.name}" + (f" (`{f.file}`)" if f.file else "") for f in items]
    if pkg.validations:
        out += ["", "Validation history:", *[f"- {v}" for v in pkg.validations]]
    u = pkg.usage
    out += ["", "## Cost", "", f"{u.model_calls} model calls, {u.input_tokens} tokens in / {u.output_tokens} out, "
            f"${u.cost_usd:.4f}"]
    return "\n".join(out) + "\n"


def render_status(status: SwarmStatus) -> str:
    lines = [f"run {status.run_id}: {status.phase.value} (round {status.round})", f"repo {status.repo_path}"]
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
        lines.append(f"checks: {'passed' if status.test_report.passed else 'FAILED'}")
    if status.delivered_branch:
        lines.append(f"delivered: {status.delivered_branch}")
    if status.error:
        lines.append(f"error: {status.error}")
    for why in status.ignored_signals:
        lines.append(f"ignored review signal: {why}")
    return "\n".join(lines)

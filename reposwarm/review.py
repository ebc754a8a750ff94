"""The review package as Markdown, for the person who approves or rejects."""

from __future__ import annotations

from reposwarm.contracts import ReviewPackage, SwarmStatus


def render_review(pkg: ReviewPackage, ui_url: str = "") -> str:
    out = [f"# Review: {pkg.run_id} (round {pkg.round})", "", f"**Task:** {pkg.task}", "",
           f"Repository `{pkg.repo_path}`, base `{pkg.base_sha[:12]}`, merged tree `{pkg.integration_sha[:12]}`"]
    if ui_url:
        out.append(f"Web UI: {ui_url}")
    if pkg.previous_comments:
        out += ["", "## Earlier review comments", *[f"- {c}" for c in pkg.previous_comments]]
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
    if pkg.conflicts:
        out += ["## Merge conflicts (lane branches kept, not merged)", *[f"- {c}" for c in pkg.conflicts], ""]
    out += ["## Checks", ""]
    report = pkg.test_report
    if report is None:
        out.append("No check profile is configured: nothing was run.")
    else:
        out.append(f"**{'PASSED' if report.passed else 'FAILED'}** in {report.duration_s:.1f}s")
        for cmd in report.commands:
            state = "timed out" if cmd.timed_out else f"exit {cmd.exit_code}"
            out.append(f"- `{' '.join(cmd.argv)}`: {state} ({cmd.duration_s:.1f}s)")
        for failure in report.failures:
            out.append(f"  - failure: {failure}")
    u = pkg.usage
    out += ["", "## Cost", "", f"{u.model_calls} model calls, {u.input_tokens} tokens in / {u.output_tokens} out, "
            f"${u.cost_usd:.4f}"]
    return "\n".join(out) + "\n"


def render_status(status: SwarmStatus) -> str:
    lines = [f"run {status.run_id}: {status.phase.value} (round {status.round})", f"repo {status.repo_path}"]
    for lane in status.lanes:
        extra = (f"{lane.turns} turns, {lane.tool_calls} tool calls, {lane.tokens} tokens, ${lane.cost_usd:.4f}"
                 if lane.turns else "")
        reason = f" - {lane.reason}" if lane.reason else ""
        lines.append(f"  {lane.lane:<16} {lane.state:<26} {extra}{reason}")
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

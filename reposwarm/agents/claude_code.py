"""Claude Code, headless: `claude -p --output-format stream-json --verbose`, pointed at our API.

It reads ANTHROPIC_BASE_URL and sends ANTHROPIC_API_KEY as `x-api-key`; CLAUDE_CONFIG_DIR holds its settings and
sessions (projects/<cwd>/<session>.jsonl, what --resume reads). No settings file but ours is loaded
(`--setting-sources=` empty, `--strict-mcp-config`): a repository's .claude/settings.json (its hooks, its
permissions) and .mcp.json do not reach it. Permissions: `--tools` is the set offered, `--allowedTools` the set
approved without asking, `--permission-mode dontAsk` denies everything else (nobody is there to ask), and
`--disallowedTools` removes tools outright. A new session gets an id we choose (`--session-id`), known before
the CLI prints anything, so a session killed early can still be resumed.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from reposwarm.agents import slice_hook
from reposwarm.agents.spec import SessionSpec, SessionSummary, ToolCall

# Quiet and offline: no telemetry, error reports, auto-update or any traffic but the model API's. No auto-memory:
# a lane keeps nothing across sessions but its session, and the memory's path (under the state dir) would be in
# the system prompt, so a restarted worker's requests would differ from the ones the proxy recorded.
QUIET_ENV = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
             "DISABLE_ERROR_REPORTING": "1", "DISABLE_BUG_COMMAND": "1", "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
             "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1"}


def argv(binary: str, spec: SessionSpec) -> tuple[list[str], str | None]:
    """The command line, and the session id it starts (None when it resumes one)."""
    cmd = [binary, "-p", "--output-format", "stream-json", "--verbose", "--input-format", "text",
           "--max-turns", str(spec.max_turns), "--permission-mode", "dontAsk",
           "--setting-sources=", "--strict-mcp-config", "--settings", json.dumps(settings(spec))]
    if spec.allowed_tools:
        cmd += ["--tools", ",".join(spec.allowed_tools), "--allowedTools", ",".join(spec.allowed_tools)]
    if spec.disallowed_tools:
        cmd += ["--disallowedTools", ",".join(spec.disallowed_tools)]
    if spec.model:
        cmd += ["--model", spec.model]
    # (the `=` form: a value starting with "-" cannot read as a flag)
    if spec.resume:
        return [*cmd, f"--resume={spec.resume}"], None
    started = spec.session_id or str(uuid.uuid4())
    return [*cmd, f"--session-id={started}"], started


def settings(spec: SessionSpec) -> dict[str, Any]:
    """Our settings, the only ones loaded: no co-author line in commits; the slice's PreToolUse hook."""
    found: dict[str, Any] = {"includeCoAuthoredBy": False}
    if spec.writable:
        found["hooks"] = slice_hook.hooks(spec.worktree, spec.writable, slice_hook.CLAUDE_MATCHER)
    return found


def env(spec: SessionSpec) -> dict[str, str]:
    return {**QUIET_ENV, "ANTHROPIC_BASE_URL": spec.base_url, "ANTHROPIC_API_KEY": spec.token,
            "CLAUDE_CONFIG_DIR": str(spec.state_dir)}


def read_event(event: dict[str, Any], summary: SessionSummary) -> None:
    """Fold one stream-json event into the summary."""
    kind = event.get("type")
    if isinstance(event.get("session_id"), str) and not summary.session_id:
        summary.session_id = event["session_id"]
    if kind == "assistant":
        for block in (event.get("message") or {}).get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                summary.tool_calls.append(ToolCall(str(block.get("name")), dict(block.get("input") or {})))
            elif isinstance(block, dict) and block.get("type") == "text":
                summary.final_text = str(block.get("text", ""))
    elif kind == "result":
        summary.session_id = event.get("session_id") or summary.session_id
        summary.is_error = bool(event.get("is_error")) or event.get("subtype") != "success"
        if isinstance(event.get("result"), str):
            summary.final_text = event["result"]
        summary.turns = int(event.get("num_turns") or 0)
        summary.usage = {"usage": event.get("usage"), "total_cost_usd": event.get("total_cost_usd"),
                         "permission_denials": event.get("permission_denials"), "subtype": event.get("subtype")}

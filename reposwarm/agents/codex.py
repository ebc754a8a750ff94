"""Codex, headless: `codex exec --json`, pointed at our API through a custom model provider.

Its configuration is a config.toml we write in a CODEX_HOME of the session's own (the state dir): the provider
`reposwarm` speaks the Responses API (`wire_api = "responses"`, the only wire a custom provider has) at our base
URL, sending the token from the variable its `env_key` names as `Authorization: Bearer`. Approvals are `never`
(nobody is there to ask) and Codex's own sandbox is off (`danger-full-access`): it would be a bubblewrap inside
ours, which forbids the user namespace it needs (--disable-userns), and it refuses its helpers under /tmp. Codex
has no turn limit of its own: reposwarm counts its tool calls and ends it past max_turns (session.py).
A session is resumed with `codex exec resume <thread id>`; the thread id is its first event's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reposwarm.agents import slice_hook
from reposwarm.agents.spec import SessionSpec, SessionSummary, ToolCall

TOKEN_ENV = "REPOSWARM_AGENT_TOKEN"  # the provider's env_key: the per-lane token, never a provider's key
DEFAULT_MODEL = "gpt-5.5"  # a model Codex knows: it offers its apply_patch tool only for models in its catalog
# The event items that are the agent's actions (tools), as `codex exec --json` names them.
ACTION_ITEMS = ("command_execution", "file_change", "mcp_tool_call", "web_search")


def _toml(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for what we write (no control characters)


def config(spec: SessionSpec) -> str:
    """config.toml for the session's CODEX_HOME."""
    return "\n".join([
        f"model = {_toml(spec.model or DEFAULT_MODEL)}",
        'model_provider = "reposwarm"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
        'web_search = "disabled"',
        "",
        # (its plugins sync from chatgpt.com and api.github.com at start-up: not from a lane, whatever the network)
        "[features]",
        f"hooks = {'true' if spec.writable else 'false'}",  # (the slice's PreToolUse hook: hooks.json)
        "plugins = false",
        "remote_plugin = false",
        "recommended_plugins = false",
        "",
        # (and it sends usage metrics to ab.chatgpt.com as it exits: off, and no exporter)
        "[analytics]",
        "enabled = false",
        "",
        "[otel]",
        'metrics_exporter = "none"',
        'exporter = "none"',
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[history]",
        'persistence = "none"',
        "",
        # the repository's own .codex/ (its config, its hooks) is never loaded: the worktree is not trusted
        f"[projects.{_toml(str(spec.worktree))}]",
        'trust_level = "untrusted"',
        "",
        "[model_providers.reposwarm]",
        'name = "reposwarm model proxy"',
        f"base_url = {_toml(spec.base_url)}",
        'wire_api = "responses"',
        f"env_key = {_toml(TOKEN_ENV)}",
        "requires_openai_auth = false",
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "",
    ])


def write_config(spec: SessionSpec) -> list[Path]:
    """config.toml, and hooks.json when the session has a slice to keep (none left from an earlier session)."""
    spec.state_dir.mkdir(parents=True, exist_ok=True)
    path = spec.state_dir / "config.toml"
    path.write_text(config(spec))
    hooks = spec.state_dir / "hooks.json"
    hooks.unlink(missing_ok=True)
    if not spec.writable:
        return [path]
    hooks.write_text(json.dumps({"hooks": slice_hook.hooks(spec.worktree, spec.writable, slice_hook.CODEX_MATCHER)}))
    return [path, hooks]


def argv(binary: str, spec: SessionSpec) -> list[str]:
    """The command line; the prompt comes on stdin ("-")."""
    cmd = [binary, "exec", "--json", "--strict-config", "--skip-git-repo-check", "--color", "never",
           "-C", str(spec.worktree)]
    if spec.writable:  # (our hooks.json is trusted as written: Codex would otherwise ask a person to trust it)
        cmd.append("--dangerously-bypass-hook-trust")
    if spec.resume:
        return [*cmd, "resume", spec.resume, "-"]
    return [*cmd, "-"]


def env(spec: SessionSpec) -> dict[str, str]:
    return {"CODEX_HOME": str(spec.state_dir), TOKEN_ENV: spec.token}


def read_event(event: dict[str, Any], summary: SessionSummary) -> None:
    """Fold one JSONL event into the summary."""
    kind = event.get("type")
    if kind == "thread.started" and isinstance(event.get("thread_id"), str):
        summary.session_id = event["thread_id"]
    elif kind == "item.completed":
        item = event.get("item") or {}
        if item.get("type") == "agent_message":
            summary.final_text = str(item.get("text", ""))
        elif item.get("type") in ACTION_ITEMS:
            summary.tool_calls.append(ToolCall(str(item["type"]), {k: v for k, v in item.items()
                                                                    if k not in ("id", "type")}))
            summary.turns = len(summary.tool_calls)  # (each action is one model reply; the closing one uncounted)
    elif kind == "turn.completed":
        summary.usage = dict(event.get("usage") or {})
    elif kind in ("turn.failed", "error"):
        summary.is_error = True
        error = event.get("error") if kind == "turn.failed" else event
        summary.final_text = str((error or {}).get("message", "")) or summary.final_text

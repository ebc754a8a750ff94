"""One agent session: what to run (SessionSpec) and what came of it (SessionSummary), whichever CLI ran it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

AGENTS = ("claude-code", "codex")


@dataclass(frozen=True)
class SessionSpec:
    agent: str  # "claude-code" or "codex"
    prompt: str  # given on stdin, never as an argument (a prompt starting with "-" must not read as a flag)
    worktree: Path  # the session's working directory, and the only tree it may write
    base_url: str  # the model API it talks to (the lane's proxy): Anthropic Messages or OpenAI Responses
    token: str  # the per-lane token it sends there: never a real provider key
    state_dir: Path  # the CLI's own configuration and sessions (CLAUDE_CONFIG_DIR, CODEX_HOME): kept for resume
    model: str | None = None
    max_turns: int = 30
    # Claude Code's tool names ("Read", "Write", "Edit", "Bash"...): offered and pre-approved; () leaves the CLI's
    # default set with only its read-only tools approved. Codex has no such list (docs/agents.md).
    allowed_tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    # The paths (relative to the worktree: folders or files) its file tools may write; () = no hook. Enforced by
    # the CLI itself before the write (slice_hook.py); what a shell command writes is the checkpoint's to judge.
    writable: tuple[str, ...] = ()
    resume: str | None = None  # the CLI's session id to continue (SessionSummary.session_id of an earlier run)
    session_id: str | None = None  # Claude Code: start a new session under this id (a UUID) rather than its own
    timeout_s: float = 600
    # The repository's common git directory: the sandbox shows the agent a private git view of its worktree's HEAD
    # (the checks' gitview.py: that commit only, filtered to `readable` when given), never the shared one.
    git_dir: Path | None = None
    readable: tuple[str, ...] | None = None
    sandboxed: bool = True  # inside the checks' bubblewrap sandbox, the model API reached through a bridge only

    def __post_init__(self) -> None:
        if self.agent not in AGENTS:
            raise ValueError(f"unknown agent {self.agent!r}: one of {', '.join(AGENTS)}")


@dataclass(frozen=True)
class ToolCall:
    name: str  # Claude Code: the tool's name (Write, Bash...); Codex: the item's type (file_change, command_execution)
    input: dict[str, Any]


@dataclass
class SessionSummary:
    agent: str
    exit_code: int | None  # None: killed (timeout, max turns)
    session_id: str | None  # what `resume` takes to continue this session
    tool_calls: list[ToolCall] = field(default_factory=list)
    final_text: str = ""
    is_error: bool = False  # the CLI said the session failed (its result event, or a failed turn)
    stopped: str = ""  # why reposwarm ended it, in words ("" when it ended by itself)
    turns: int = 0  # model turns, as the CLI counts them (Claude Code) or as its events show (Codex)
    usage: dict[str, Any] = field(default_factory=dict)  # the CLI's own usage report
    events: list[dict[str, Any]] = field(default_factory=list)  # every JSON event it printed, in order
    stderr: str = ""  # the end of its standard error
    seconds: float = 0.0
    sandboxed: bool = False

"""A lane run by an outside agent (HelperRole.agent: Claude Code, Codex, ACP): one session of it, as one activity.

The lane's workflow (workflows/lane.py) runs the assignment as one heartbeating activity (activities/agent_lane.py
`agent_session`) on the lane's host, in its worktree, and gets back what came of it: what the agent spent (the
model proxy's tally), what it did, its session (to resume for the next assignment), its final text (the lane's
summary), and what it wrote outside its slice (reverted at the checkpoint, as after a `run` command).
"""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from reposwarm.contracts.base import Contract, Usage
from reposwarm.contracts.lane import FileEdit, HelperTask
from reposwarm.text import inert_text

# What the session is asked: the lane's first assignment (a new session, the whole prompt), its next one (a warm
# lane's repair or next round: the same session resumed with the assignment), or to go on after a budget raise.
SessionKind = Literal["first", "next", "raised"]


class AgentSessionInput(Contract):
    task: HelperTask
    kind: SessionKind = "first"
    resume: str = ""  # the CLI's session id to resume ("" for a new session)
    spent: Usage = Usage()  # what the assignment spent before this session (its budget counts it)
    token_budget: int
    cost_budget_usd: float | None = None
    told: list[str] = []  # what the agent should hear first (its writes outside the slice, reverted last time)


class AgentSessionResult(Contract):
    agent: str
    session_id: str = ""
    usage: Usage = Usage()  # the model proxy's tally of the session's calls (the ledger's `model_call` lines)
    upstream_calls: int = 0  # calls the provider answered
    replayed_calls: int = 0  # calls answered from the proxy's record (a retried attempt asks nothing twice)
    budget_refused: int = 0  # calls the lane's budget refused: the session ended at its budget
    turns: int = 0
    tool_calls: int = 0
    final_text: str = ""  # the agent's last words: the lane's summary
    ok: bool = True  # the CLI ended by itself, saying it succeeded
    reason: str = ""  # why not, in one line
    reverted: list[str] = []  # its changes outside the lane's writable slice, undone at the checkpoint
    edits: list[FileEdit] = []  # the files the session changed (committed at its checkpoint)
    head_sha: str = ""

    _inert = field_validator("final_text", "reason", "reverted")(lambda cls, v: inert_text(v))

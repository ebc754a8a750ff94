"""A lane run by an outside agent (HelperRole.agent: claude-code, codex, acp): one session of it, as one activity.

On the lane's host, in its worktree (workflows/lane.py makes it first): the worker's one model proxy (started once
per worker process, on its event loop) opens the lane with a budget hook from the lane's budgets; the agent runs
sandboxed (a CLI by reposwarm/agents/session.py, an ACP agent by its command and reposwarm/agents/acp.py) with the
lane's prompt (reposwarm/agents/lane_prompt.py) and only the proxy's address and a lane token as its credentials;
then what it wrote outside its slice is reverted and the rest committed, as a `run` command's work is at its
turn's checkpoint (activities/repo.py checkpoint_lane), and the result carries the proxy's tally (usage and cost,
as the ledger's `model_call` lines count them), the agent's tool calls, its session id and its final text.

Durable: the activity heartbeats the agent's session id. A retried attempt (its worker killed mid-session) resumes
that session where the CLI can (`--resume`, `codex exec resume`) from the CLI's state kept in the run's folder
(agents/<lane>/<agent>), on the worktree as the killed attempt left it; the proxy answers every request it already
answered for this lane's dispatch from its record, so the provider is asked nothing twice.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.repo import checkpoint_lane, lane_worktree
from reposwarm.agents import clis
from reposwarm.agents.acp import AcpSpec, run_acp_session
from reposwarm.agents.lane_prompt import CLAUDE_DENIED, CLAUDE_TOOLS, prompt_for, writable_dirs
from reposwarm.agents.session import SessionRefused, run_session
from reposwarm.agents.spec import SessionSpec, SessionSummary
from reposwarm.contracts import (
    AcpAgent,
    AgentSessionInput,
    AgentSessionResult,
    CheckpointInput,
    FileEdit,
    HelperTask,
    Usage,
)
from reposwarm.contracts.cost import over_budget
from reposwarm.proxy import ALLOW, BudgetAnswer, LaneKey, LaneTally, ModelProxy, refuse
from reposwarm.runs import ledger
from reposwarm.runs.store import run_dir
from reposwarm.slices.leftovers import changes, nested_git
from reposwarm.slices.policy import PathPolicy, touches_git
from reposwarm.text import inert, inert_line
from reposwarm.vcs import gitcmd
from reposwarm.vcs.gitcmd import IDENTITY
from reposwarm.vcs.remote import is_url, open_repository

CHECKPOINT_EVERY_S = 5.0  # at most one checkpoint commit this often while the agent works
SESSION_S = 3 * 3600  # the longest one session may run (the lane's max_wall_s, if shorter); options.agent_session
SUMMARY_CHARS = 4000  # of the agent's final text, kept as the lane's summary
INTERRUPTED = ("reposwarm: your session was interrupted (the machine running it was restarted) and now goes on. "
               "Your files are as you left them. Go on where you stopped; when you are done, stop, and reply with a "
               "short summary of what you changed and why.")

_proxies: dict[int, ModelProxy] = {}  # the worker's one proxy, per event loop (a test process may run several)
_starting: dict[int, asyncio.Lock] = {}


async def worker_proxy() -> ModelProxy:
    """The worker's model proxy, started on first use on this event loop and kept for the process's life."""
    loop = asyncio.get_running_loop()
    key = id(loop)
    lock = _starting.setdefault(key, asyncio.Lock())
    async with lock:
        proxy = _proxies.get(key)
        if proxy is None:
            proxy = ModelProxy()
            await proxy.start()
            _proxies[key] = proxy
    return proxy


def cli_model(agent: str, model: str) -> str | None:
    """The lane's model as the CLI names it: Claude Code takes an `anthropic:` model, Codex an `openai:` one; for
    any other (a replay script, another provider) the CLI's own default."""
    provider, _, name = model.partition(":")
    wanted = {"claude-code": "anthropic", "codex": "openai"}.get(agent)
    return name if provider == wanted and name else None


def state_dir(task: HelperTask, agent: str) -> Path:
    """The CLI's own state (its config and sessions, what a resume reads), kept in the run's folder for the lane."""
    return run_dir(task.run_id) / "agents" / task.lane / agent


def _budget_hook(task: HelperTask, req: AgentSessionInput, before: Usage) -> Any:
    async def ask(key: LaneKey, tally: LaneTally) -> BudgetAnswer:
        # (the next call is counted as one token: a session at its budget exactly asks nothing more)
        spent = req.spent + before + tally.usage
        over = over_budget(task.lane, task.price, spent, req.token_budget, req.cost_budget_usd, 1)
        if over is None:
            return ALLOW
        return refuse(f"the lane is at its {'token' if over.what == 'tokens' else 'cost'} budget; reposwarm asks "
                      "a person whether to raise it")
    return ask


def _earlier_session(task: HelperTask, agent: str, folder: Path) -> str:
    """The session a killed attempt of this activity left (its heartbeat's, else Claude Code's id we chose)."""
    for detail in activity.info().heartbeat_details:
        if isinstance(detail, dict) and isinstance(detail.get("session_id"), str) and detail["session_id"]:
            return str(detail["session_id"])
    if agent == "claude-code" and activity.info().attempt > 1:
        chosen = _chosen_id(task)
        if any(folder.glob(f"projects/*/{chosen}.jsonl")):
            return chosen
    return ""


def _chosen_id(task: HelperTask) -> str:
    """Claude Code's session id for a new session of this activity: the same on each attempt."""
    info = activity.info()
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"reposwarm:{info.workflow_id}/{info.activity_id}/{task.lane}"))


def _resumable(agent: str, folder: Path, session: str) -> bool:
    """Whether the CLI's state dir holds the session (a lane rebuilt on another host has none of it)."""
    if not session or "/" in session or session.startswith("."):
        return False
    if agent == "claude-code":
        return any(folder.glob(f"projects/*/{session}.jsonl"))
    if agent == "acp":  # (the agent says whether it can load or resume it; if not, a new session: prompt_if_new)
        return True
    return any(folder.glob(f"sessions/**/*{session}*.jsonl"))


def _git_common_dir(worktree: Path) -> Path | None:
    done = gitcmd.run(["rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=worktree,
                      capture_output=True, text=True)
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


def _head(worktree: Path) -> str:
    return gitcmd.run(["rev-parse", "HEAD"], cwd=worktree, capture_output=True, text=True, check=True).stdout.strip()


def _changed(worktree: Path, before: str, after: str, agent: str) -> list[FileEdit]:
    if before == after:
        return []
    out = gitcmd.run(["diff", "--name-status", "--no-renames", "-z", before, after], cwd=worktree,
                     capture_output=True, text=True, check=True).stdout.split("\0")
    edits = []
    for status, path in zip(out[0::2], out[1::2], strict=False):
        operation = {"A": "create", "D": "delete"}.get(status[:1], "modify")
        edits.append(FileEdit(path=path, operation=operation, reason=f"written by the {agent} agent in its session"))
    return edits


def commit_as_it_goes(worktree: Path, task: HelperTask, message: str) -> bool:
    """A checkpoint while the agent works: its changes inside the slice committed as they are, nothing reverted
    under it (its writes outside the slice, symlinks and nested repositories wait for the session's end, where
    checkpoint_lane judges them). The agent's git is a private view (the sandbox), so the lane's index is ours."""
    policy = PathPolicy(worktree, task.allowed_paths, task.read_only_paths)
    nested = nested_git(worktree)
    mine = [c.path for c in changes(worktree) if c.code != "!!" and not c.symlink and policy.writable(c.path)
            and not touches_git(c.path) and not any(c.path == n.rsplit("/", 1)[0] or
                                                   c.path.startswith(n.rsplit("/", 1)[0] + "/") for n in nested)]
    if not mine:
        return False
    spec = b"".join(f":(literal){p}".encode("utf-8", "surrogateescape") + b"\0" for p in mine)
    if gitcmd.run(["add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul"], cwd=worktree, input=spec,
                  capture_output=True).returncode != 0:
        return False
    if gitcmd.run(["diff", "--cached", "--quiet"], cwd=worktree, capture_output=True).returncode != 1:
        return False
    done = gitcmd.run([*IDENTITY, "commit", "-q", "--no-verify", "-m", inert(message)], cwd=worktree,
                      capture_output=True)
    if done.returncode == 0 and is_url(task.repo_path):  # where another host can take the lane up from
        open_repository(task.repo_path).push(f"refs/heads/{task.branch}")
    return done.returncode == 0


def _beat(summary: SessionSummary, spent: Usage) -> None:
    activity.heartbeat({"session_id": summary.session_id or "", "agent": summary.agent,
                        "tool_calls": len(summary.tool_calls), "usage": spent.model_dump()})


def _earlier_usage() -> Usage:
    """What a killed attempt of this activity had spent, as its last heartbeat said (its ledger lines have it
    too): the lane's usage counts it, as the built-in loop's counts a turn's every attempt."""
    for detail in activity.info().heartbeat_details:
        if isinstance(detail, dict) and isinstance(detail.get("usage"), dict):
            try:
                return Usage.model_validate(detail["usage"])
            except ValueError:
                return Usage()
    return Usage()


@activity.defn
async def agent_session(req: AgentSessionInput) -> AgentSessionResult:
    """Run the lane's assignment as one session of its agent; then revert what it wrote outside its slice,
    commit the rest, and say what it spent and did."""
    task = req.task
    agent = task.role.agent_name
    if agent not in ("claude-code", "codex", "acp"):
        raise ApplicationError(f"lane {task.lane}: agent {agent} cannot be run by this version (builtin, "
                               "claude-code, codex and acp can)", type="AgentUnsupported", non_retryable=True)
    try:
        if agent != "acp":  # (an ACP agent is its own command: one not found ends its session, saying so)
            clis.find(agent)
    except clis.AgentCliMissing as err:
        raise ApplicationError(f"lane {task.lane}: {err}", type="AgentCliMissing", non_retryable=True) from None
    worktree = lane_worktree(task.run_id, task.lane)
    folder = state_dir(task, agent)
    folder.mkdir(parents=True, exist_ok=True)
    before = await asyncio.to_thread(_head, worktree)
    earlier = _earlier_session(task, agent, folder)
    resume = earlier or req.resume
    if resume and not _resumable(agent, folder, resume):
        resume = ""
    prompt = INTERRUPTED if earlier else prompt_for(req)
    if not resume and (earlier or req.kind != "first"):  # nothing to resume here: a new session, the whole prompt
        prompt = prompt_for(req.model_copy(update={"kind": "first", "resume": ""}))
    proxy = await worker_proxy()
    before_usage = _earlier_usage()
    if task.price is not None:
        proxy.prices.setdefault(task.model, task.price)
    lane = proxy.open_lane(LaneKey(run_id=task.run_id, lane=task.lane, round=task.round, attempt=task.attempt),
                           budget=_budget_hook(task, req, before_usage))
    git_dir = await asyncio.to_thread(_git_common_dir, worktree)
    spec = None if agent == "acp" else SessionSpec(
        agent=agent, prompt=prompt, worktree=worktree,
        base_url=proxy.anthropic_base_url if agent == "claude-code" else proxy.openai_base_url,
        token=lane.token, state_dir=folder, model=cli_model(agent, task.model), max_turns=task.role.max_turns,
        allowed_tools=CLAUDE_TOOLS if agent == "claude-code" else (),
        disallowed_tools=CLAUDE_DENIED if agent == "claude-code" else (),
        writable=writable_dirs(task), resume=resume or None,
        session_id=None if resume or agent != "claude-code" else _chosen_id(task),
        timeout_s=min(task.role.max_wall_s, SESSION_S), git_dir=git_dir,
        readable=(*task.allowed_paths, *task.read_only_paths))
    acp_spec = None if not isinstance(task.role.agent, AcpAgent) else AcpSpec(
        command=tuple(task.role.agent.acp), prompt=prompt, worktree=worktree, model_env=proxy.agent_env(lane.token),
        state_dir=folder, allowed_paths=tuple(task.allowed_paths), read_only_paths=tuple(task.read_only_paths),
        resume=resume or None,
        prompt_if_new=prompt_for(req.model_copy(update={"kind": "first", "resume": ""})) if resume else None,
        max_turns=task.role.max_turns, timeout_s=min(task.role.max_wall_s, SESSION_S), git_dir=git_dir)
    heard: list[tuple[str, int, int]] = [("", -1, -1)]
    saving: list[asyncio.Task[bool]] = []  # the checkpoint in flight, at most one
    saved = [0, time.monotonic() - CHECKPOINT_EVERY_S]  # tool calls checkpointed, and when

    def on_event(event: dict[str, Any], summary: SessionSummary) -> None:
        spent = before_usage + proxy.tally(lane.token).usage
        said = (summary.session_id or "", len(summary.tool_calls), spent.model_calls)
        if said != heard[0]:  # (a beat with details when they change; the interceptor repeats them between)
            heard[0] = said
            _beat(summary, spent)
        # after a tool's result (Claude Code's `user` event, Codex's completed item), now and then: a checkpoint
        calls = len(summary.tool_calls)
        if event.get("type") in ("user", "item.completed") and calls > saved[0] \
                and time.monotonic() - saved[1] >= CHECKPOINT_EVERY_S and not (saving and not saving[0].done()):
            saved[:] = [calls, time.monotonic()]
            saving[:] = [asyncio.create_task(asyncio.to_thread(
                commit_as_it_goes, worktree, task, f"reposwarm {task.lane}: {agent} session, after {calls} tool calls"))]

    try:
        if acp_spec is not None:
            summary = await run_acp_session(acp_spec, on_event)
        else:
            assert spec is not None
            summary = await run_session(spec, on_event)
    except SessionRefused as err:
        raise ApplicationError(f"lane {task.lane}: {err}", type="AgentSessionRefused", non_retryable=True) from None
    finally:
        tally = proxy.close_lane(lane.token)
        if saving:  # (the last one done before the session's own checkpoint)
            await asyncio.gather(*saving, return_exceptions=True)
    checkpoint = await asyncio.to_thread(checkpoint_lane, CheckpointInput(
        run_id=task.run_id, lane=task.lane, repo_path=task.repo_path, allowed_paths=task.allowed_paths,
        read_only_paths=task.read_only_paths,
        message=f"reposwarm {task.lane}: {agent} session\n\n{inert_line(summary.final_text)[:2000]}"))
    edits = await asyncio.to_thread(_changed, worktree, before, checkpoint.head_sha, agent)
    ok = summary.exit_code == 0 and not summary.is_error and not summary.stopped
    reason = "" if ok else _why(summary, tally)
    ledger.record_activity(task.run_id, "agent_session", lane=task.lane, agent=agent, round=task.round,
                           dispatch=task.attempt, session_id=summary.session_id, resumed=bool(resume),
                           exit_code=summary.exit_code, tool_calls=len(summary.tool_calls), turns=summary.turns,
                           upstream_calls=tally.upstream_calls, replayed_calls=tally.replayed_calls,
                           budget_refused=tally.refused_calls, reverted=checkpoint.refused or None,
                           seconds=summary.seconds, ok=ok, reason=reason or None, after_restart=bool(earlier))
    return AgentSessionResult(
        agent=agent, session_id=summary.session_id or resume or "", usage=before_usage + tally.usage,
        upstream_calls=tally.upstream_calls, replayed_calls=tally.replayed_calls, budget_refused=tally.refused_calls,
        turns=summary.turns, tool_calls=len(summary.tool_calls),
        final_text=ledger.redact(summary.final_text)[:SUMMARY_CHARS], ok=ok, reason=reason,
        reverted=checkpoint.refused, edits=edits, head_sha=checkpoint.head_sha)


def _why(summary: SessionSummary, tally: LaneTally) -> str:
    if tally.refused_calls:
        return "the session reached the lane's budget"
    if summary.stopped:
        return f"the {summary.agent} session {summary.stopped}"
    last = summary.final_text.strip().splitlines()[-1:] if summary.final_text.strip() else []
    lines = summary.stderr.strip().splitlines()
    # (the bridge's own word that the command is not there says more than what broke off after it)
    tail = next((line for line in lines if line.startswith("[reposwarm: agent not found")), (lines or [""])[-1])
    detail = inert_line(ledger.redact(last[0] if last else tail))[:300]
    return f"the {summary.agent} session ended with exit code {summary.exit_code}" + (f": {detail}" if detail else "")

"""Run one session of any agent that speaks the Agent Client Protocol (ACP: `agent: {acp: [command, args...]}`).

The agent's command runs whole inside the same sandbox as the CLIs' (session.py `sandboxed`: the worktree, its own
state dir, nothing of the worker's environment but the model proxy's address and the lane's token, no network but
the bridge to the proxy). reposwarm is the ACP *client* on the agent's stdio (the `agent-client-protocol` package
speaks the JSON-RPC): initialize, a new session with the worktree as its cwd (or the earlier one loaded or resumed,
where the agent says it can), one prompt turn with the lane's prompt.

What the agent asks of its client is answered by the lane's slice (reposwarm/slices/policy.py, the built-in tools'
own path policy), in the worker, before anything happens:
- `fs/read_text_file` only inside what the lane may read (its allowed and read-only paths);
- `fs/write_text_file` only inside its writable slice; anything else is refused with an error saying why, and
  nothing is written (the file is opened beneath the worktree with no symlink followed);
- `session/request_permission` is decided, never asked of a person: an edit, delete or move whose every location
  is writable is allowed once, a read or search inside the readable paths too, a fetch is rejected (no network),
  a command is allowed (it runs in the sandbox; what it writes outside the slice is reverted at the checkpoint);
- terminals are not offered (`terminal: false`); asked anyway, they are refused.

The session's updates (tool calls, the agent's message text, usage) become the same SessionSummary the CLIs'
sessions produce (spec.py), so the lane's activity treats an ACP session as it treats theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

# (the `agents` extra's package: without it the worker still starts, and an ACP lane fails saying what to install)
try:
    from acp import PROTOCOL_VERSION, RequestError, text_block
    from acp.client.connection import ClientSideConnection
    from acp.connection import StreamDirection, StreamEvent
    from acp.schema import (
        AgentCapabilities,
        AgentMessageChunk,
        AllowedOutcome,
        ClientCapabilities,
        CreateElicitationResponse,
        CreateTerminalResponse,
        DeniedOutcome,
        ElicitationMode,
        EnvVariable,
        FileSystemCapabilities,
        Implementation,
        KillTerminalResponse,
        PermissionOption,
        ReadTextFileResponse,
        ReleaseTerminalResponse,
        RequestPermissionResponse,
        TerminalOutputResponse,
        TextContentBlock,
        ToolCallStart,
        ToolCallUpdate,
        UsageUpdate,
        WaitForTerminalExitResponse,
        WriteTextFileResponse,
    )
    MISSING = ""
except ImportError:  # pragma: no cover (tests/test_agent_acp.py runs it without the package, in a subprocess)
    MISSING = ("the agent-client-protocol package is not installed: pip install 'reposwarm[agents]' (or pip "
               "install 'agent-client-protocol==0.12.1')")

from pydantic import ValidationError

from reposwarm.agents import beneath
from reposwarm.agents.session import OnEvent, SessionRefused, keep_tail, sandboxed
from reposwarm.agents.spec import SessionSummary, ToolCall
from reposwarm.slices.policy import PathPolicy, PathRefused

AGENT = "acp"
CANCEL_GRACE_S = 5  # after session/cancel (past max_turns), how long the turn has to end before the agent is killed
EXIT_GRACE_S = 3  # after its turn, with its stdin closed, how long the agent has to exit by itself
NO_TERMINAL = ("reposwarm offers no terminals to an ACP agent (its client capabilities say terminal: false): run "
               "commands with your own tools; they run in this lane's sandbox")


@dataclass(frozen=True)
class AcpSpec:
    command: tuple[str, ...]  # the agent's argv, as the lanes file's `acp:` gives it (no shell)
    prompt: str  # the lane's prompt: the one prompt turn's text
    worktree: Path  # the session's cwd, and the only tree it may write
    model_env: dict[str, str]  # the model proxy's address and the lane's token (ModelProxy.agent_env): all it gets
    state_dir: Path  # the agent's own files (XDG config, data, state, cache): kept for a resume
    allowed_paths: tuple[str, ...]  # the lane's slice (gitignore-style patterns): what it may write and read
    read_only_paths: tuple[str, ...] = ()  # what it may read besides
    resume: str | None = None  # an ACP session id of an earlier session to load or resume, if the agent can
    prompt_if_new: str | None = None  # the prompt when `resume` cannot go on and a new session starts (None: prompt)
    max_turns: int = 30  # tool calls past this end the turn (session/cancel)
    timeout_s: float = 600
    git_dir: Path | None = None  # as SessionSpec.git_dir: a private git view of the worktree's HEAD
    sandboxed: bool = True

    def __post_init__(self) -> None:
        if not self.command or not all(isinstance(part, str) and part for part in self.command):
            raise ValueError("an ACP agent's command is a list of non-empty strings: [command, args...]")


@dataclass
class _Turn:
    """What the session's updates said so far, kept as they come."""

    text: list[str] = field(default_factory=list)  # the agent's message text since its last tool call
    all_text: list[str] = field(default_factory=list)
    replaying: bool = False  # a loaded session's history is being sent again: not this turn's
    over: asyncio.Event = field(default_factory=asyncio.Event)  # past max_turns


class AcpMissing(SessionRefused):
    """The ACP package (the `agents` extra) is not installed: says what to install."""


class LaneClient:
    """The ACP client side of one lane's session: the agent's requests answered by the lane's slice."""

    def __init__(self, spec: AcpSpec, summary: SessionSummary, on_event: OnEvent | None) -> None:
        self.spec, self.summary, self.on_event = spec, summary, on_event
        self.policy = PathPolicy(spec.worktree, list(spec.allowed_paths), list(spec.read_only_paths))
        self.turn = _Turn()

    # --- what the agent says and asks ---

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if self.turn.replaying:
            return
        if isinstance(update, AgentMessageChunk) and isinstance(update.content, TextContentBlock):
            self.turn.text.append(update.content.text)
            self.turn.all_text.append(update.content.text)
        elif isinstance(update, ToolCallStart):
            self.turn.text.clear()  # (the lane's summary is the agent's last text, after its last tool call)
            self.summary.tool_calls.append(ToolCall(update.kind or "other", {
                "title": update.title, "locations": [loc.path for loc in update.locations or []],
                "raw_input": update.raw_input}))
            if len(self.summary.tool_calls) > self.spec.max_turns and not self.turn.over.is_set():
                self.summary.stopped = f"ended after {self.spec.max_turns} turns (max_turns)"
                self.turn.over.set()
        elif isinstance(update, UsageUpdate):
            self.summary.usage["context_used"], self.summary.usage["context_size"] = update.used, update.size
        self.summary.final_text = "".join(self.turn.text or self.turn.all_text)
        self.heard({"method": "session/update", "session_id": session_id,
                    "update": getattr(update, "session_update", "")})

    async def read_text_file(self, session_id: str, path: str, line: int | None = None, limit: int | None = None,
                             **kwargs: Any) -> ReadTextFileResponse:
        try:
            rel, real = self.policy.for_read(self._relative(path))
            data = beneath.read(self.policy.root, real.relative_to(self.policy.root).as_posix())
        except PathRefused as err:
            raise self._refused("fs/read_text_file", path, str(err)) from None
        except OSError as err:
            raise RequestError(-32002, f"{path}: {err.strerror or type(err).__name__}", {"path": path}) from None
        text = data.decode("utf-8", errors="replace")
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            text = "".join(lines[start:start + limit] if limit is not None else lines[start:])
        self.heard({"method": "fs/read_text_file", "path": rel})
        return ReadTextFileResponse(content=text)

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> WriteTextFileResponse:
        data = content.encode("utf-8", errors="surrogateescape")
        try:
            rel, real = self.policy.for_write(self._relative(path), len(data))
            beneath.write(self.policy.root, real.relative_to(self.policy.root).as_posix(), data)
        except PathRefused as err:
            raise self._refused("fs/write_text_file", path, str(err)) from None
        except OSError as err:
            raise RequestError(-32603, f"{path} was not written: {err.strerror or type(err).__name__}",
                               {"path": path}) from None
        self.heard({"method": "fs/write_text_file", "path": rel})
        return WriteTextFileResponse()

    async def request_permission(self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption],
                                 **kwargs: Any) -> RequestPermissionResponse:
        why = self._judge(tool_call)
        wanted = ("allow_once", "allow_always") if why is None else ("reject_once", "reject_always")
        chosen = next((o for kind in wanted for o in options if o.kind == kind), None)
        outcome = AllowedOutcome(outcome="selected", option_id=chosen.option_id) if chosen else \
            DeniedOutcome(outcome="cancelled")
        if why is not None:
            self._note_refusal("session/request_permission", tool_call.title or tool_call.tool_call_id, why)
        self.heard({"method": "session/request_permission", "allowed": why is None})
        return RequestPermissionResponse(outcome=outcome, field_meta={"reposwarm": why or "allowed by the lane"})

    async def create_terminal(self, session_id: str, command: str, args: list[str] | None = None,
                              env: list[EnvVariable] | None = None, cwd: str | None = None,
                              output_byte_limit: int | None = None, **kwargs: Any) -> CreateTerminalResponse:
        raise self._refused("terminal/create", command, NO_TERMINAL)

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> TerminalOutputResponse:
        raise RequestError(-32601, NO_TERMINAL)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str,
                                     **kwargs: Any) -> WaitForTerminalExitResponse:
        raise RequestError(-32601, NO_TERMINAL)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> KillTerminalResponse | None:
        raise RequestError(-32601, NO_TERMINAL)

    async def release_terminal(self, session_id: str, terminal_id: str,
                               **kwargs: Any) -> ReleaseTerminalResponse | None:
        raise RequestError(-32601, NO_TERMINAL)

    async def create_elicitation(self, message: str, mode: ElicitationMode, **kwargs: Any) -> CreateElicitationResponse:
        raise RequestError(-32601, "nobody is there to answer a question: decide, and say what you assumed")

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        return None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        return None

    # --- deciding ---

    def _judge(self, tool_call: ToolCallUpdate) -> str | None:
        """Why the lane refuses this tool call (None: allowed). Decided here, never asked of a person."""
        paths = [loc.path for loc in tool_call.locations or []]
        try:
            if tool_call.kind in ("edit", "delete", "move"):
                if not paths:
                    return "reposwarm cannot tell which file this changes (it names no location), so it is refused"
                for path in paths:
                    self.policy.for_write(self._relative(path))
            elif tool_call.kind == "fetch":
                return "this lane has no network but its model's: fetching is refused"
            else:  # (read, search; a command, thinking, anything else: the sandbox holds what it does)
                for path in paths:
                    self.policy.for_read(self._relative(path))
        except PathRefused as err:
            return str(err)
        return None

    def _relative(self, path: str) -> str:
        """An ACP path (absolute, as the protocol has them) as a path relative to the worktree, for the policy."""
        if not isinstance(path, str) or not path:
            raise PathRefused("the path is empty")
        given = PurePosixPath(path)
        if not given.is_absolute():
            return path
        for root in (self.spec.worktree, self.policy.root):  # (as the agent was told it, and resolved)
            with contextlib.suppress(ValueError):
                return given.relative_to(PurePosixPath(root)).as_posix() or "."
        raise PathRefused(f"{path} is outside this lane's worktree ({self.spec.worktree})")

    def _refused(self, method: str, path: str, why: str) -> RequestError:
        self._note_refusal(method, path, why)
        return RequestError(-32001, f"reposwarm refused this: {why}", {"path": path, "refused_by": "reposwarm"})

    def _note_refusal(self, method: str, path: str, why: str) -> None:
        event = {"reposwarm": "refused", "method": method, "path": path, "why": why}
        self.summary.events.append(event)
        self.heard(event)

    def heard(self, event: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(event, self.summary)

    def observe(self, event: StreamEvent) -> None:
        """Every JSON-RPC message the agent sent, kept in order as the CLIs' events are."""
        if event.direction == StreamDirection.INCOMING:
            self.summary.events.append(event.message)


def agent_env(spec: AcpSpec) -> dict[str, str]:
    """The agent's own variables: the model proxy's address and token, and its XDG folders in its state dir (where
    an agent keeps its sessions, so a resume finds them). Nothing of the worker's."""
    folders = {name: str(spec.state_dir / sub) for name, sub in (
        ("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"), ("XDG_STATE_HOME", "state"),
        ("XDG_CACHE_HOME", "cache"))}
    return {**folders, **spec.model_env}


def _base_url(spec: AcpSpec) -> str:
    """The model proxy's address, which the sandbox bridges to: every base URL the agent is given must be it."""
    urls = {value.removesuffix("/v1").rstrip("/") for name, value in spec.model_env.items()
            if name.endswith("_BASE_URL")}
    if len(urls) != 1:
        raise SessionRefused(f"an ACP agent is given one model proxy's address, not {sorted(urls) or 'none'}")
    return urls.pop()


@contextlib.asynccontextmanager
async def _unconfined(argv: list[str], env: dict[str, str],
                      spec: AcpSpec) -> AsyncIterator[tuple[list[str], dict[str, str]]]:
    home = spec.state_dir / "home"
    home.mkdir(exist_ok=True)
    yield argv, {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
                 "TMPDIR": tempfile.gettempdir(), **env}


async def run_acp_session(spec: AcpSpec, on_event: OnEvent | None = None) -> SessionSummary:
    """Run the ACP agent's one prompt turn to its end (or its timeout, or past its turns) and say what came of it.
    `on_event` hears each update, request and refusal with the summary so far (the session id first of all)."""
    if MISSING:
        raise AcpMissing(MISSING)
    spec.state_dir.mkdir(parents=True, exist_ok=True)
    summary = SessionSummary(AGENT, None, None, sandboxed=spec.sandboxed)
    began = time.monotonic()
    env = agent_env(spec)
    if spec.sandboxed:
        notes: list[str] = []
        launch = sandboxed(list(spec.command), env, worktree=spec.worktree, state_dir=spec.state_dir,
                           base_url=_base_url(spec), git_dir=spec.git_dir,
                           readable=(*spec.allowed_paths, *spec.read_only_paths), notes=notes)
    else:
        notes, launch = [], _unconfined(list(spec.command), env, spec)
    async with launch as (argv, full_env):
        summary.stderr = "".join(notes)
        await _drive(argv, full_env, spec, summary, LaneClient(spec, summary, on_event))
    summary.seconds = round(time.monotonic() - began, 2)
    return summary


async def _drive(argv: list[str], env: dict[str, str], spec: AcpSpec, summary: SessionSummary,
                 client: LaneClient) -> None:
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=spec.worktree, env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True, limit=64 * 1024 * 1024)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stderr = bytearray()
    draining = asyncio.create_task(keep_tail(proc.stderr, stderr))
    conn = ClientSideConnection(client, proc.stdin, proc.stdout, observers=[client.observe])
    ended = False  # the prompt turn came to its end
    try:
        ended = await asyncio.wait_for(_converse(conn, spec, summary, client), spec.timeout_s)
    except TimeoutError:
        summary.stopped = f"timed out after {spec.timeout_s:.0f}s"
    except RequestError as err:
        summary.is_error = True
        summary.final_text = summary.final_text or f"[reposwarm: the ACP agent answered an error: {err}]"
    except (ConnectionError, ValidationError, ValueError) as err:  # (it exited, or spoke what is not ACP)
        summary.is_error = True
        stderr.extend(f"\n[reposwarm: the ACP connection ended: {type(err).__name__}: {err}]".encode()[:2000])
    finally:
        with contextlib.suppress(Exception):
            await conn.close()
        with contextlib.suppress(Exception):
            proc.stdin.close()
        try:
            code: int | None = await asyncio.wait_for(proc.wait(), EXIT_GRACE_S)
        except TimeoutError:
            _kill(proc)
            await proc.wait()
            code = None
            if ended:
                stderr.extend(b"\n[reposwarm: the agent did not exit after its turn, with its stdin closed: killed]")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(draining, 5)
    # (an agent serves until its stdin closes: its turn's end, not its exit status, says it finished)
    summary.exit_code = 0 if ended and not summary.stopped else (None if summary.stopped else code)
    summary.stderr += stderr.decode(errors="replace")


async def _converse(conn: ClientSideConnection, spec: AcpSpec, summary: SessionSummary, client: LaneClient) -> bool:
    """initialize, the session (new, or the earlier one loaded or resumed), one prompt turn. True when the turn
    ended as the agent's own (end_turn); stop reasons and refusals are said in the summary."""
    started = await conn.initialize(
        protocol_version=PROTOCOL_VERSION,
        client_capabilities=ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
                                               terminal=False),
        client_info=Implementation(name="reposwarm", title="reposwarm", version="1"))
    if started.protocol_version != PROTOCOL_VERSION:
        raise ValueError(f"the agent speaks ACP version {started.protocol_version}; reposwarm speaks "
                         f"{PROTOCOL_VERSION}")
    capabilities = started.agent_capabilities or AgentCapabilities()
    session_id = await _earlier(conn, spec, capabilities, client) if spec.resume else None
    if session_id is None:
        try:
            session_id = (await conn.new_session(cwd=str(spec.worktree), mcp_servers=[])).session_id
        except RequestError as err:
            if err.code == -32000:  # (auth_required: its login would be the worker's, which it never gets)
                raise RequestError(err.code, "the agent asks to be logged in; reposwarm gives it only the model "
                                   "proxy's address and the lane's token (OPENAI_*/ANTHROPIC_* variables)") from None
            raise
    summary.session_id = session_id
    client.heard({"reposwarm": "session", "session_id": session_id, "resumed": session_id == spec.resume})
    summary.turns = 1  # (ACP's turn is the prompt turn: one per session run)
    prompt = spec.prompt if session_id == spec.resume or spec.prompt_if_new is None else spec.prompt_if_new
    turn = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=[text_block(prompt)]))
    past_turns = asyncio.ensure_future(client.turn.over.wait())
    try:
        await asyncio.wait({turn, past_turns}, return_when=asyncio.FIRST_COMPLETED)
        if not turn.done():  # past max_turns: the agent is asked to stop, then stopped
            with contextlib.suppress(Exception):
                await conn.cancel(session_id=session_id)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(turn), CANCEL_GRACE_S)
            return False
        answer = turn.result()
    finally:
        for task in (turn, past_turns):
            task.cancel()
    if answer.usage is not None:
        summary.usage.update(answer.usage.model_dump(exclude_none=True))
    summary.usage["stop_reason"] = answer.stop_reason
    if answer.stop_reason != "end_turn":
        summary.is_error = True
        summary.final_text = summary.final_text or f"[the agent's turn ended: {answer.stop_reason}]"
        return False
    return True


async def _earlier(conn: ClientSideConnection, spec: AcpSpec, capabilities: AgentCapabilities,
                   client: LaneClient) -> str | None:
    """The earlier session, resumed (session/resume) or loaded (session/load, its history replayed and not counted
    as this turn's) where the agent says it can; None: a new session it is."""
    assert spec.resume is not None
    can_resume = capabilities.session_capabilities is not None and capabilities.session_capabilities.resume is not None
    try:
        if can_resume:
            await conn.resume_session(session_id=spec.resume, cwd=str(spec.worktree), mcp_servers=[])
            return spec.resume
        if capabilities.load_session:
            client.turn.replaying = True
            try:
                await conn.load_session(cwd=str(spec.worktree), session_id=spec.resume, mcp_servers=[])
            finally:
                client.turn.replaying = False
            return spec.resume
    except RequestError as err:  # (a session it no longer has: a new one, with the whole prompt)
        client.summary.stderr += f"[reposwarm: the agent could not go on with session {spec.resume}: {err}]\n"
    return None


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)

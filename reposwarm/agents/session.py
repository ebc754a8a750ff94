"""Run one agent session to its end: the CLI as a subprocess in the lane's worktree, its prompt on stdin, its
JSON events read as they come, and a summary (exit status, session id for resume, tool calls, final text).

Sandboxed (the default), it runs whole inside the checks' bubblewrap sandbox (reposwarm/checks/sandbox/): the
worktree writable, its state dir (the CLI's own config and sessions) writable, the toolchains and the CLI
read-only, a private HOME and /tmp, nothing of the worker's environment, and a network namespace of its own
whose only way out is the bridge to the model API (bridge.py). Unsandboxed (tests of the CLI alone, or
REPOSWARM_SANDBOX=off), it gets the same scrubbed environment and no confinement.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from reposwarm.agents import bridge, claude_code, clis, codex
from reposwarm.agents.spec import SessionSpec, SessionSummary
from reposwarm.checks import sandbox
from reposwarm.checks.sandbox import gitview, reaping
from reposwarm.checks.sandbox.environment import private_home
from reposwarm.contracts import CheckProfile

LOOPBACK = ("127.0.0.1", "localhost")
STDERR_KEPT = 16_000
# The agent's sandbox: no network (the bridge is its way to the model API), a private /tmp and HOME big enough
# for the CLI's own files, and address space for a JavaScript runtime (Claude Code's) that reserves much.
AGENT_PROFILE = CheckProfile(commands=[["agent"]], network=False, memory_mb=1024 * 1024, tmp_mb=2048,
                             max_processes=512)


class SessionRefused(RuntimeError):
    """The session cannot start as asked (a model API the sandbox cannot reach, no sandbox): says why."""



async def keep_tail(stream: asyncio.StreamReader, kept: bytearray) -> None:
    """Read an agent's stream (its stderr) to its end, keeping its last STDERR_KEPT bytes for the lane's reason."""
    while chunk := await stream.read(65536):
        kept.extend(chunk)
        del kept[:-STDERR_KEPT]

def _command(spec: SessionSpec, cli: clis.AgentCli) -> tuple[list[str], dict[str, str], str | None, list[Path]]:
    """The CLI's argv, its own variables, the session id it starts (Claude Code's, chosen up front), and the
    files of its state dir it must not change (Codex's config and hooks: read-only in the sandbox)."""
    if spec.agent == "claude-code":
        argv, started = claude_code.argv(str(cli.binary), spec)
        return argv, claude_code.env(spec), started, []
    fixed = codex.write_config(spec)
    return codex.argv(str(cli.binary), spec), codex.env(spec), None, fixed


def _loopback_port(base_url: str) -> int:
    parts = urlsplit(base_url)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK or parts.port is None:
        raise SessionRefused(f"a sandboxed agent reaches only a model API on this host's loopback, as "
                             f"http://127.0.0.1:PORT (the lane's proxy), not {base_url!r}")
    return parts.port


def _path(cli: clis.AgentCli, base: str) -> str:
    return os.pathsep.join([str(cli.path_dir), base]) if cli.path_dir else base


OnEvent = Callable[[dict[str, Any], SessionSummary], None]


async def run_session(spec: SessionSpec, on_event: OnEvent | None = None) -> SessionSummary:
    """Run the session to its end (or its timeout, or past its turns) and say what came of it. `on_event` hears
    each event as it comes, with the summary so far (an activity heartbeats the session id from it, so a worker
    killed mid-session leaves the id its retry resumes)."""
    cli = clis.find(spec.agent)
    spec.state_dir.mkdir(parents=True, exist_ok=True)
    argv, agent_env, started, fixed = _command(spec, cli)
    summary = SessionSummary(spec.agent, None, started, sandboxed=spec.sandboxed)
    began = time.monotonic()
    if not spec.sandboxed:
        home = spec.state_dir / "home"
        home.mkdir(exist_ok=True)
        env = {"PATH": _path(cli, "/usr/local/bin:/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
               "TMPDIR": tempfile.gettempdir(), **agent_env}
        await _run(argv, env, spec, summary, on_event)
    else:
        notes: list[str] = []
        async with sandboxed(argv, agent_env, worktree=spec.worktree, state_dir=spec.state_dir,
                             base_url=spec.base_url, git_dir=spec.git_dir, readable=spec.readable,
                             path_dir=cli.path_dir, fixed=fixed, notes=notes) as (wrapped, env):
            summary.stderr = "".join(notes)
            await _run(wrapped, env, spec, summary, on_event)
    summary.seconds = round(time.monotonic() - began, 2)
    return summary


@contextlib.asynccontextmanager
async def sandboxed(argv: list[str], agent_env: dict[str, str], *, worktree: Path, state_dir: Path, base_url: str,
                    git_dir: Path | None = None, readable: tuple[str, ...] | None = None,
                    path_dir: Path | None = None, fixed: Sequence[Path] = (),
                    notes: list[str] | None = None) -> AsyncIterator[tuple[list[str], dict[str, str]]]:
    """`argv` made to run whole inside the agent's sandbox: the launcher's command line and environment, good while
    the context lasts (the bridge to the model API at `base_url` and the git view live as long). run_session starts
    a CLI through it, acp.py an ACP agent. `notes` hears why the git view could not be made, if it could not."""
    if not sandbox.enabled():
        raise SessionRefused("agent sessions run only sandboxed here, and REPOSWARM_SANDBOX=off")
    port = _loopback_port(base_url)
    host = urlsplit(base_url).hostname or "127.0.0.1"
    view_scratch = gitview.scratch_dir() if git_dir is not None else None
    try:
        view = None
        if git_dir is not None and view_scratch is not None:
            try:
                view = await asyncio.to_thread(gitview.make, worktree, git_dir, readable, view_scratch)
            except (gitview.GitViewError, OSError) as err:  # the session runs on, without git metadata
                if notes is not None:
                    notes.append(f"[reposwarm: the agent's git view could not be made ({err})]\n")
        with reaping.scratch_folder("rs-agent-") as scratch:  # (short: a socket path has 108 bytes)
            socket_path = scratch / "api.sock"
            async with bridge.HostBridge(socket_path, "127.0.0.1" if host == "localhost" else host, port):
                yield _sandboxed(argv, agent_env, worktree, state_dir, path_dir, socket_path, port, list(fixed), view)
    finally:
        if view_scratch is not None:
            shutil.rmtree(view_scratch, ignore_errors=True)


def _sandboxed(argv: list[str], agent_env: dict[str, str], worktree: Path, state_dir: Path, path_dir: Path | None,
               socket_path: Path, port: int, fixed: list[Path],
               view: gitview.GitView | None) -> tuple[list[str], dict[str, str]]:
    """The launcher's command line (it becomes bwrap, which runs the bridge, which runs the agent) and env."""
    binary = sandbox.bwrap()
    home = private_home()
    # (later binds go on top: the state dir writable, then the files in it the agent must not change read-only)
    binds = (sandbox.Bind(state_dir, state_dir, writable=True),
             *(sandbox.Bind(path, path) for path in fixed),
             sandbox.Bind(socket_path, socket_path, writable=True))
    tree = sandbox.Tree(root=worktree, git_dir=None, binds=binds)
    inner = [sys.executable, "-I", "-S", "-c", bridge.INSIDE, str(socket_path), str(port), *argv]
    env = sandbox.sandbox_env(AGENT_PROFILE, home, worktree) | agent_env
    path = env.get("PATH", "/usr/bin:/bin")
    env["PATH"] = os.pathsep.join([str(path_dir), path]) if path_dir else path
    limits, _ = sandbox.rlimits(AGENT_PROFILE, None)
    launch = {"parent": os.getpid(), "cgroup": None, "rlimits": limits, "nice": 0, "env": sorted(env),
              "argv": sandbox.bwrap_argv(binary, inner, tree, AGENT_PROFILE, home, view)}
    return [sys.executable, "-I", "-S", "-c", sandbox.LAUNCHER, json.dumps(launch)], env


async def _run(argv: list[str], env: dict[str, str], spec: SessionSpec, summary: SessionSummary,
               on_event: OnEvent | None) -> None:
    read_event = claude_code.read_event if spec.agent == "claude-code" else codex.read_event
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=spec.worktree, env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True, limit=64 * 1024 * 1024)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(spec.prompt.encode())
    with contextlib.suppress(ConnectionError):
        await proc.stdin.drain()
    proc.stdin.close()
    stderr = bytearray()

    async def read_events() -> None:
        assert proc.stdout is not None
        while True:
            try:
                line = await proc.stdout.readline()
            except ValueError:  # (one line past the reader's limit: an event no one should have to hold)
                summary.stopped = "ended: it printed one event of more than 64 MB"
                _kill(proc)
                return
            if not line:
                return
            try:
                event = json.loads(line)
            except ValueError:
                continue  # (a line that is not an event: the CLI's own chatter)
            if not isinstance(event, dict):
                continue
            summary.events.append(event)
            try:
                read_event(event, summary)
            except (TypeError, ValueError, AttributeError, KeyError):
                pass  # (an event of a shape we do not know: kept in `events`, not read)
            if on_event is not None:
                on_event(event, summary)
            # Codex has no turn limit of its own: its tool calls past max_turns end it
            if spec.agent == "codex" and len(summary.tool_calls) > spec.max_turns:
                summary.stopped = f"ended after {spec.max_turns} turns (max_turns)"
                _kill(proc)
                return

    reading = asyncio.gather(read_events(), keep_tail(proc.stderr, stderr))
    try:
        await asyncio.wait_for(asyncio.shield(reading), spec.timeout_s)
    except TimeoutError:
        summary.stopped = f"timed out after {spec.timeout_s:.0f}s"
        _kill(proc)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(reading, 10)
    finally:
        if proc.returncode is None and summary.stopped:
            _kill(proc)
        code = await proc.wait()
    summary.exit_code = None if summary.stopped else code
    summary.stderr += stderr.decode(errors="replace")


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)

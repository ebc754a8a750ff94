"""A restarted agent asks its provider nothing twice (issue 47 item 4), with the real Claude Code and Codex CLIs.

Each session runs as tests/test_agent_clis.py runs them (sandboxed, in a linked worktree, bridged to one port) and
talks to a real ModelProxy on loopback, whose provider is the fake model server (tests/fake_agent_api.py): the
fake counts every call that reached "the provider". A restart is a new proxy (a new lane token) over the same
run's record and the same lane, and a new agent process with the same state dir: the proxy must know the new
process's requests for the ones it already answered (reposwarm/proxy/exchanges.py the_question), so the fake sees
none of them again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reposwarm.agents.session import run_session
from reposwarm.agents.spec import SessionSpec, SessionSummary
from reposwarm.proxy import LaneKey, LaneTally, ModelProxy
from reposwarm.runs.objects import run_dir
from tests.fake_agent_api import (
    Call,
    Drop,
    FakeMessages,
    FakeResponses,
    Said,
    Text,
    function_outputs,
    messages_turns,
    responses_turns,
    tool_results,
)
from tests.helpers import ROOT, git, make_repo
from tests.test_agent_clis import _cli_or_skip, _processes_naming

WORKER_KEYS = {"ANTHROPIC_API_KEY": "sk-ant-api03-WORKER-key-for-the-proxy",
               "OPENAI_API_KEY": "sk-proj-WORKER-key-for-the-proxy"}
SESSION_LIMIT_S = 90
PATCH = "*** Begin Patch\n*** Add File: notes/hello.txt\n+hello from codex\n*** End Patch\n"
AGENTS = ["claude-code", "codex"]


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo", {"README.md": "a repository\n", "src/app.py": "print('app')\n"})
    lane = tmp_path / "lane"
    git(repo, "worktree", "add", "-q", "-b", "swarm/run/lane", str(lane))
    return lane


@pytest.fixture(autouse=True)
def worker_keys(monkeypatch: pytest.MonkeyPatch, reposwarm_home: Path) -> None:
    """The worker's provider keys (the proxy's, never the agent's); the run's record under the tests' home."""
    for name, value in WORKER_KEYS.items():
        monkeypatch.setenv(name, value)


def _turn(agent: str, body: dict[str, Any]) -> int:
    """Which call of the agent loop a request is: the tool results it carries (0 for the first call)."""
    return len(tool_results(body)) if agent == "claude-code" else len(function_outputs(body))


def _provider(agent: str, script: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake provider, where the proxy looks for it (the built-in providers' variables)."""
    fake = FakeMessages(script) if agent == "claude-code" else FakeResponses(script)
    monkeypatch.setenv("ANTHROPIC_BASE_URL" if agent == "claude-code" else "OPENAI_BASE_URL", fake.base_url)
    return fake


def _spec(agent: str, worktree: Path, proxy: ModelProxy, token: str, state: Path, **kw: Any) -> SessionSpec:
    return SessionSpec(agent=agent, prompt=kw.pop("prompt", "Write the file."), worktree=worktree,
                       base_url=proxy.anthropic_base_url if agent == "claude-code" else proxy.openai_base_url,
                       token=token, state_dir=state, timeout_s=SESSION_LIMIT_S, max_turns=6,
                       allowed_tools=("Read", "Write") if agent == "claude-code" else (),
                       git_dir=worktree.parent / "repo" / ".git", **kw)


async def _session(spec: SessionSpec, proxy: ModelProxy, key: LaneKey) -> tuple[SessionSummary, LaneTally]:
    """One session through the proxy, under a lane pass of its own; what the agent said and the lane's tally."""
    lane = proxy.open_lane(key)
    began = time.monotonic()
    spec = dataclasses.replace(spec, token=lane.token)
    summary = await run_session(spec)
    tally = proxy.close_lane(lane.token)
    print(f"{spec.agent} session{' (resumed)' if spec.resume else ''}: {time.monotonic() - began:.1f}s, "
          f"{tally.upstream_calls} upstream, {tally.replayed_calls} from the record")
    return summary, tally


def _new_key() -> LaneKey:
    return LaneKey(run_id=f"replay-{uuid.uuid4().hex[:10]}", lane="api", round=1, attempt=1)


def _first_turns(agent: str, worktree: Path) -> list[Said]:
    """One tool call whose result is the same whenever it runs (no time, no random id in it), then a text."""
    if agent == "claude-code":
        return [[Call("Write", {"file_path": str(worktree / "notes" / "hello.txt"), "content": "hello from claude\n"})]]
    return [[Call("apply_patch", {"input": PATCH})]]


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_restarted_session_is_answered_whole_from_the_record(
        agent: str, worktree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session run to its end, then run again by a new process over a new proxy (the worker restarted), on the
    worktree as it was: every call is answered from the record, and the provider sees not one of them again."""
    _cli_or_skip(agent)
    key, state = _new_key(), tmp_path / "state"
    turns = _first_turns(agent, worktree)
    script = messages_turns(turns, "Wrote it.") if agent == "claude-code" else responses_turns(turns, "Wrote it.")
    wrote = worktree / "notes" / "hello.txt"
    with _provider(agent, script, monkeypatch) as api:
        async with ModelProxy() as proxy:
            first, tally = await _session(_spec(agent, worktree, proxy, "", state), proxy, key)
        assert first.exit_code == 0 and first.final_text == "Wrote it.", first.stderr
        asked = len(api.requests)
        assert [_turn(agent, r.body) for r in api.model_requests()] == [0, 1]
        assert tally.upstream_calls == asked and tally.replayed_calls == 0
        # the worker restarted: its lane's worktree as the dispatch began, a new proxy, a new agent process
        assert wrote.exists()
        git(worktree, "clean", "-q", "-fdx")
        async with ModelProxy() as proxy:
            again, tally = await _session(_spec(agent, worktree, proxy, "", state), proxy, key)
        assert len(api.requests) == asked  # the provider was asked nothing
    assert again.exit_code == 0, again.stderr
    assert (tally.upstream_calls, tally.replayed_calls, tally.failed_calls) == (0, asked, 0)
    assert tally.usage.input_tokens == 0 and tally.usage.cost_usd == 0
    assert again.session_id != first.session_id  # a process of its own, a session of its own...
    assert again.final_text == first.final_text  # ...told what the first was told
    assert [c.name for c in again.tool_calls] == [c.name for c in first.tool_calls]
    assert wrote.read_text() == f"hello from {'claude' if agent == 'claude-code' else 'codex'}\n"


# The session as an activity runs it: in a worker process of its own (killed here), which hears the session id from
# the first event that carries it and writes it down, as an activity heartbeats it.
RUNNER = """
import asyncio, json, sys
from pathlib import Path
sys.path[:0] = [sys.argv[1]]
from reposwarm.agents.session import run_session
from reposwarm.agents.spec import SessionSpec
given = json.loads(sys.argv[2])
paths = {name: Path(given[name]) for name in ("worktree", "state_dir", "git_dir")}
spec = SessionSpec(**{**given, **paths, "allowed_tools": tuple(given["allowed_tools"])})
def heard(event, summary):
    if summary.session_id:
        Path(sys.argv[3]).write_text(summary.session_id)
asyncio.run(run_session(spec, heard))
"""


@pytest.fixture
def worker_tmp() -> Iterator[Path]:
    """The killed worker's TMPDIR: what it had there (its bridge's socket folder, the agent's git view) is never
    cleaned up by a process that is SIGKILLed, so it goes here, and the test removes it. (Short: a unix socket's
    path has 108 bytes.)"""
    folder = Path(tempfile.mkdtemp(prefix="rs-killed-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


async def _until(check: Any, what: str, limit_s: float = SESSION_LIMIT_S) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("then", ["again", "resumed"])
@pytest.mark.parametrize("agent", AGENTS)
async def test_a_session_killed_after_its_first_call_does_not_ask_it_again(
        agent: str, then: str, worktree: Path, tmp_path: Path, worker_tmp: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker is SIGKILLed (the agent with it) while its second call is with the provider, which never answers
    it. Restarted over a new proxy, the session run again with the same prompt gets its first call from the
    record; resumed with the CLI's resume, it carries the first call on. Either way the provider is not asked the
    first call again."""
    _cli_or_skip(agent)
    key, state, heard = _new_key(), tmp_path / "state", tmp_path / "session-id"
    held, release, dying = threading.Event(), threading.Event(), [True]
    # A first tool that changes nothing: Claude Code's first request shows the worktree's git status, so on a
    # worktree the killed session changed, the same prompt is a new question (docs/agents.md).
    if agent == "claude-code":
        plain = messages_turns([[Text("First, a look."), Call("Read", {"file_path": str(worktree / "README.md")})]],
                               "Done.")
    else:
        plain = responses_turns([[Call("exec_command", {"cmd": "cat README.md"})]], "Done.")

    def script(body: dict[str, Any]) -> Said:
        if dying[0] and _turn(agent, body) >= 1:  # the second call: the worker dies while it waits for the reply
            held.set()
            release.wait(SESSION_LIMIT_S)
            raise Drop  # (and its proxy with it: the call is never answered, so never recorded)
        return plain(body)

    records = run_dir(key.run_id) / "proxy"
    with _provider(agent, script, monkeypatch) as api:
        async with ModelProxy() as proxy:
            lane = proxy.open_lane(key)
            spec = _spec(agent, worktree, proxy, lane.token, state, prompt="Read the README.",
                         session_id=str(uuid.uuid4()) if agent == "claude-code" else None)
            given = {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(spec).items()}
            worker = subprocess.Popen([sys.executable, "-c", RUNNER, str(ROOT), json.dumps(given), str(heard)],
                                      env={**os.environ, "TMPDIR": str(worker_tmp)})
            try:
                assert await asyncio.to_thread(held.wait, SESSION_LIMIT_S), "the session never made its second call"
                await _until(lambda: len(list(records.glob("*/*.json"))) == 1, "the first call was not recorded")
                worker.kill()  # SIGKILL: the sandbox dies with it (bwrap --die-with-parent, PDEATHSIG)
                worker.wait(30)
            finally:
                dying[0] = False
                release.set()
                if worker.poll() is None:
                    worker.kill()
            await _until(lambda: not _processes_naming(lane.token), "the agent outlived its worker")
            await _until(lambda: proxy.tally(lane.token).failed_calls == 1, "the second call did not end")
            killed = proxy.close_lane(lane.token)
        assert (killed.upstream_calls, killed.failed_calls) == (1, 1)
        assert sorted(p.name.split("-")[1] for p in worker_tmp.iterdir()) == ["agent", "gitview"]  # (its leftovers)
        before, before_all = len(api.model_requests()), len(api.requests)
        assert [_turn(agent, r.body) for r in api.model_requests()] == [0, 1]
        # the worker restarted: a new proxy over the same record, the worktree as the killed session left it
        session_id = heard.read_text()
        async with ModelProxy() as proxy:
            if then == "again":
                restarted = _spec(agent, worktree, proxy, "", state, prompt="Read the README.",
                                  session_id=str(uuid.uuid4()) if agent == "claude-code" else None)
            else:
                restarted = _spec(agent, worktree, proxy, "", state, prompt="Go on.", resume=session_id)
            again, tally = await _session(restarted, proxy, key)
        asked_after = [_turn(agent, r.body) for r in api.model_requests()[before:]]
        asked_all_after = len(api.requests) - before_all
    assert again.exit_code == 0 and again.final_text == "Done.", again.stderr
    assert asked_after and 0 not in asked_after, asked_after  # the first call was not asked again
    if then == "again":
        assert tally.replayed_calls == 1 and again.session_id != session_id
        assert again.tool_calls[0].name == ("Read" if agent == "claude-code" else "command_execution")
    else:
        assert tally.replayed_calls == 0 and again.session_id == session_id
        assert asked_after[0] == 1  # the resumed conversation carries the first call's tool call and result on
    assert tally.upstream_calls == asked_all_after

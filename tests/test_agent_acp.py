"""Any ACP agent as a lane's agent (issue 47): reposwarm/agents/acp.py drives an agent that speaks the Agent Client
Protocol, here our own (tests/fake_acp_agent.py, the `agent-client-protocol` package's agent side), for real: a real
subprocess in the checks' bubblewrap sandbox, a real model proxy on loopback in front of the fake model server
(tests/fake_models.py, Chat Completions) which scripts what the agent does, a linked git worktree as a lane's.

The slice is enforced in the client methods the agent must use: fs/write_text_file and fs/read_text_file go through
the lane's path policy before anything happens, and session/request_permission is answered by it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from reposwarm.agents import beneath
from reposwarm.agents.acp import MISSING, AcpSpec, run_acp_session
from reposwarm.agents.spec import SessionSummary
from reposwarm.checks import sandbox
from reposwarm.proxy import LaneKey, LaneTally, ModelProxy
from tests.fake_models import FakeModelServer
from tests.helpers import git, make_repo

WORKER_KEYS = {"OPENAI_API_KEY": "sk-proj-PLANTED-worker-key-for-the-proxy",
               "ANTHROPIC_API_KEY": "sk-ant-api03-PLANTED-worker-key"}
PLANTED = {"REPOSWARM_TEST_SECRET": "planted-worker-secret-9f2c"}  # a secret of the worker's, under any name
AGENT_SOURCE = (Path(__file__).parent / "fake_acp_agent.py").read_text()
SESSION_LIMIT_S = 60
GOAL = "Goal for lane api: write notes/hello.txt"


@pytest.fixture(autouse=True)
def _sandbox_or_skip() -> None:
    why = sandbox.status()
    if why is not None:
        pytest.skip(f"ACP sessions run in the checks' sandbox, and here: {why}")


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo", {"README.md": "a repository\n", "src/app.py": "print('app')\n",
                                         "docs/guide.md": "the guide\n"})
    lane = tmp_path / "lane"
    git(repo, "worktree", "add", "-q", "-b", "swarm/run/api", str(lane))
    return lane


@pytest.fixture(autouse=True)
def worker_env(monkeypatch: pytest.MonkeyPatch, reposwarm_home: Path) -> None:
    for name, value in {**WORKER_KEYS, **PLANTED}.items():
        monkeypatch.setenv(name, value)


def _call(call_id: str, name: str, **arguments: str) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def _script(*turns: dict[str, Any]) -> dict[str, Any]:
    return {"lanes": {"api": {1: list(turns)}}}


async def _session(fake: FakeModelServer, worktree: Path, monkeypatch: pytest.MonkeyPatch,
                   **kw: Any) -> tuple[SessionSummary, LaneTally, str]:
    """One ACP session of the fake agent through a real proxy whose provider is `fake`: its summary, the lane's
    tally and its token."""
    if MISSING:
        pytest.skip(f"{MISSING} (make test installs it)")
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    async with ModelProxy() as proxy:
        lane = proxy.open_lane(LaneKey(run_id=f"acp-{uuid.uuid4().hex[:10]}", lane="api", round=1, attempt=1))
        spec = AcpSpec(command=(sys.executable, "-I", "-c", AGENT_SOURCE, *kw.pop("flags", ())),
                       prompt=kw.pop("prompt", GOAL),
                       worktree=worktree, model_env=proxy.agent_env(lane.token),
                       state_dir=worktree.parent / "acp-state", allowed_paths=("notes/",),
                       read_only_paths=("docs/",), timeout_s=SESSION_LIMIT_S,
                       git_dir=worktree.parent / "repo" / ".git", **kw)
        began = time.monotonic()
        summary = await run_acp_session(spec)
        took = time.monotonic() - began
        tally = proxy.close_lane(lane.token)
    print(f"ACP session: {took:.1f}s, {tally.upstream_calls} model calls; stderr: {summary.stderr[-2000:]}")
    assert took < SESSION_LIMIT_S
    return summary, tally, lane.token


def _tool_results(fake: FakeModelServer) -> list[str]:
    """What the agent told its model each tool call came to, in order."""
    return [m["content"] for m in fake.requests[-1].body["messages"] if m["role"] == "tool"]


async def test_an_acp_session_writes_the_scripted_file(worktree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script({"tool_calls": [_call("c1", "write_file", path="notes/hello.txt", content="hello from acp\n")]},
                     {"content": "Wrote notes/hello.txt, saying hello."})
    with FakeModelServer("openai", script) as fake:
        summary, tally, token = await _session(fake, worktree, monkeypatch)
    assert (worktree / "notes" / "hello.txt").read_text() == "hello from acp\n"
    assert summary.exit_code == 0 and not summary.is_error and not summary.stopped, summary
    assert summary.session_id and summary.sandboxed and summary.turns == 1
    assert summary.final_text == "Wrote notes/hello.txt, saying hello."
    assert [(c.name, c.input["locations"]) for c in summary.tool_calls] == \
        [("edit", [str(worktree / "notes" / "hello.txt")])]
    assert _tool_results(fake) == ["written"]  # (the permission was asked and granted, then the file written)
    methods = [e.get("method") for e in summary.events]
    assert "session/request_permission" in methods and "fs/write_text_file" in methods
    # the model was asked through the proxy, with the lane's token; the provider saw only the worker's key
    assert tally.upstream_calls == 2 and len(fake.requests) == 2
    assert all(r.headers["authorization"] == f"Bearer {WORKER_KEYS['OPENAI_API_KEY']}" for r in fake.requests)
    assert token not in json.dumps([r.headers for r in fake.requests])


async def test_a_write_outside_the_slice_is_refused_before_it_happens(worktree: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script(
        {"tool_calls": [_call("c1", "write_file_unasked", path="src/app.py", content="print('hijacked')\n"),
                        _call("c2", "write_file", path="src/other.py", content="x = 1\n"),
                        _call("c3", "write_file_unasked", path="notes/../../escape.txt", content="out\n"),
                        _call("c4", "write_file_unasked", path="notes/ok.txt", content="fine\n")]},
        {"content": "Two writes were refused; notes/ok.txt written."})
    with FakeModelServer("openai", script) as fake:
        summary, _, _ = await _session(fake, worktree, monkeypatch)
    assert (worktree / "src" / "app.py").read_text() == "print('app')\n"  # never written, not written and reverted
    assert not (worktree / "src" / "other.py").exists()
    assert not (worktree.parent / "escape.txt").exists()
    assert (worktree / "notes" / "ok.txt").read_text() == "fine\n"
    told = _tool_results(fake)
    # the agent was told why, through the protocol: the fs error, and the permission's rejection with its reason
    assert told[0].startswith("error: reposwarm refused this: ") and "src/app.py" in told[0] \
        and "outside this lane's allowed paths (notes/)" in told[0], told
    assert told[1].startswith("permission rejected: ") and "outside this lane's allowed paths" in told[1], told
    assert told[2].startswith("error: reposwarm refused this: ") and "outside" in told[2], told
    assert told[3] == "written"
    refused = [e for e in summary.events if e.get("reposwarm") == "refused"]
    assert [e["method"] for e in refused] == ["fs/write_text_file", "session/request_permission",
                                              "fs/write_text_file"]
    assert summary.exit_code == 0 and summary.final_text == "Two writes were refused; notes/ok.txt written."


async def test_a_read_outside_the_readable_paths_is_refused(worktree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (worktree / "notes").mkdir()
    (worktree / "notes" / "link.md").symlink_to(worktree / "src" / "app.py")
    script = _script(
        {"tool_calls": [_call("c1", "read_file", path="src/app.py"), _call("c2", "read_file", path="docs/guide.md"),
                        _call("c3", "read_file", path="notes/link.md"), _call("c4", "read_file", path="/etc/hostname"),
                        _call("c5", "read_file", path=".git/config")]},
        {"content": "Read the guide."})
    with FakeModelServer("openai", script) as fake:
        summary, _, _ = await _session(fake, worktree, monkeypatch)
    told = _tool_results(fake)
    assert told[0].startswith("error: reposwarm refused this: ") and "outside this lane's readable paths" in told[0]
    assert told[1] == "the guide\n"  # (read-only paths are readable)
    assert told[2].startswith("error: reposwarm refused this: ") and "symlink" in told[2], told
    assert told[3].startswith("error: reposwarm refused this: ") and "outside this lane's worktree" in told[3], told
    assert told[4].startswith("error: reposwarm refused this: ") and ".git" in told[4], told
    assert "print('app')" not in json.dumps([r.body for r in fake.requests])
    assert len([e for e in summary.events if e.get("reposwarm") == "refused"]) == 4


async def test_no_worker_secret_reaches_the_agent(worktree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script({"tool_calls": [_call("c1", "show_env")]}, {"content": "Looked around."})
    with FakeModelServer("openai", script) as fake:
        summary, _, token = await _session(fake, worktree, monkeypatch)
    seen = json.loads(_tool_results(fake)[0])  # the agent's whole environment, as it sent it to its model
    assert seen["OPENAI_API_KEY"] == token and seen["ANTHROPIC_API_KEY"] == token
    assert seen["OPENAI_BASE_URL"].startswith("http://127.0.0.1:")
    assert seen.pop("_interfaces") == ["lo"]  # (its own network namespace: the bridge to the proxy is its way out)
    for value in [*WORKER_KEYS.values(), *PLANTED.values()]:
        assert value not in json.dumps(seen)
        assert value not in json.dumps(summary.events) and value not in summary.stderr
    assert not set(PLANTED) & set(seen)
    assert seen["XDG_STATE_HOME"] == str(worktree.parent / "acp-state" / "state")
    assert summary.exit_code == 0


async def test_past_its_turns_the_turn_is_cancelled(worktree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script(*[{"tool_calls": [_call(f"c{n}", "write_file_unasked", path=f"notes/{n}.txt", content=f"{n}\n")]}
                       for n in range(1, 6)], {"content": "Wrote five notes."})
    with FakeModelServer("openai", script) as fake:
        summary, _, _ = await _session(fake, worktree, monkeypatch, max_turns=2)
    assert summary.stopped == "ended after 2 turns (max_turns)" and summary.exit_code is None
    # (the third went past; the agent, told session/cancel, stops at its next step, which may be one more)
    assert 3 <= len(summary.tool_calls) < 5
    assert {"stopReason": "cancelled"} in [e.get("result") for e in summary.events]  # (its own answer to the cancel)
    assert not (worktree / "notes" / "5.txt").exists() and len(fake.requests) < 6


@pytest.mark.parametrize("flag", ["--load", "--resume", ""])
async def test_a_later_session_goes_on_where_the_agent_can(worktree: Path, monkeypatch: pytest.MonkeyPatch,
                                                           flag: str) -> None:
    """An earlier session is resumed (session/resume) or loaded (session/load, its replayed history not taken for
    this turn's text) where the agent advertises it; else a new session gets the whole prompt (prompt_if_new)."""
    write = {"tool_calls": [_call("c1", "write_file", path="notes/hello.txt", content="hello\n")]}
    script = _script(write, {"content": "First done."}, {"content": "Second done."})
    flags = (flag,) if flag else ()
    with FakeModelServer("openai", script) as fake:
        first, _, _ = await _session(fake, worktree, monkeypatch, flags=flags)
        assert first.exit_code == 0 and first.final_text == "First done."
        asked = len(fake.requests)
        later, _, _ = await _session(fake, worktree, monkeypatch, flags=flags, resume=first.session_id,
                                     prompt="Go on: the reviewer asks for more.",
                                     prompt_if_new=GOAL + " (a new session: the whole prompt)")
    assert later.exit_code == 0, later
    sent = [m["content"] for m in fake.requests[asked].body["messages"] if m["role"] == "user"]
    if flag:
        assert later.session_id == first.session_id
        assert sent == [GOAL, "Go on: the reviewer asks for more."]  # (the earlier conversation, then the new turn)
        assert later.final_text == "Second done." and later.tool_calls == []
    else:
        assert later.session_id != first.session_id
        assert sent == [GOAL + " (a new session: the whole prompt)"]
        assert later.final_text == "First done."  # (the script's turns from the start again)


def test_without_the_acp_package_the_worker_starts_and_an_acp_session_says_what_to_install(tmp_path: Path) -> None:
    """The package is the `agents` extra's: a worker without it imports its activities all the same."""
    probe = """
import asyncio, pathlib, sys
sys.modules["acp"] = None  # (as if agent-client-protocol were not installed: importing it raises ImportError)
import activities.agent_lane  # the worker's activity, which runs ACP lanes
from reposwarm.agents.acp import AcpMissing, AcpSpec, run_acp_session
spec = AcpSpec(command=("my-agent",), prompt="p", worktree=pathlib.Path(sys.argv[1]), model_env={},
               state_dir=pathlib.Path(sys.argv[1]) / "state", allowed_paths=("notes/",))
try:
    asyncio.run(run_acp_session(spec))
except AcpMissing as err:
    print("REFUSED:", err)
"""
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr
    assert "REFUSED: the agent-client-protocol package is not installed: pip install 'reposwarm[agents]'" in \
        done.stdout, done.stdout


def test_a_folder_swapped_for_a_symlink_after_the_policy_looked_does_not_lead_out(tmp_path: Path) -> None:
    """The agent runs while the worker answers its fs requests: the write walks the folders itself, no symlink
    followed (reposwarm/agents/beneath.py), so a swap between the policy's look and the write cannot lead out."""
    root, outside = tmp_path / "lane", tmp_path / "outside"
    (root / "notes").mkdir(parents=True)
    outside.mkdir()
    beneath.write(root, "notes/a.txt", b"inside\n")  # (the policy said yes to notes/a.txt; then the agent swaps)
    (root / "notes" / "a.txt").unlink()
    (root / "notes").rmdir()
    (root / "notes").symlink_to(outside)
    with pytest.raises(OSError):
        beneath.write(root, "notes/a.txt", b"escaped\n")
    with pytest.raises(OSError):
        beneath.read(root, "notes/a.txt")
    (outside / "b.txt").write_text("outside\n")
    (root / "b.txt").symlink_to(outside / "b.txt")
    with pytest.raises(OSError):
        beneath.write(root, "b.txt", b"escaped\n")
    assert list(outside.iterdir()) == [outside / "b.txt"] and (outside / "b.txt").read_text() == "outside\n"

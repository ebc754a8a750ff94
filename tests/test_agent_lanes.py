"""Lanes run by outside agents (issue 47, items 1, 2, 4 and 6): a lanes file names each lane's agent, and the real
Claude Code and Codex CLIs (the `agents` extra) do the lanes' work through the real dev server and worker, offline.

The worker's model proxy stands between each CLI and the fake providers of tests/fake_agent_api.py (set as the
worker's ANTHROPIC_BASE_URL and OPENAI_BASE_URL), with planted keys in the worker's environment that must reach
no agent, no request body and no ledger line. Each test is under a minute on the 2-core machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata

from reposwarm.checks.sandbox import status as sandbox_status
from reposwarm.contracts import BudgetChange, LaneProposal, LaneStatus, Phase
from reposwarm.contracts.errors import ConfigError
from reposwarm.lanes.loading import read_lanes_file
from reposwarm.lanes.proposal_file import COLUMNS, rows
from reposwarm.proxy.exchanges import request_hash
from reposwarm.proxy.wire import ANTHROPIC, RESPONSES
from reposwarm.runs import ledger
from reposwarm.runs.store import run_dir
from tests.fake_agent_api import (
    Call,
    FakeMessages,
    FakeResponses,
    Said,
    Text,
    function_outputs,
    responses_turns,
    tool_results,
)
from tests.helpers import (
    WorkerProcess,
    approve_and_wait,
    cli,
    git,
    home_ledger,
    make_repo,
    start_run,
    wait_for_phase,
    write_yaml,
)
from tests.test_agent_clis import _cli_or_skip
from workflows.swarm import SwarmWorkflow

PLANTED = {"ANTHROPIC_API_KEY": "sk-ant-api03-PLANTED-worker-key-agent-lanes",
           "OPENAI_API_KEY": "sk-proj-PLANTED-worker-key-agent-lanes"}
RUN_LIMIT_S = 60


def lanes_error(tmp_path: Path, lanes: dict[str, Any]) -> str:
    path = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": lanes}})
    with pytest.raises(ConfigError) as caught:
        read_lanes_file(path)
    return str(caught.value)


def test_a_lane_names_its_agent_and_a_bad_one_is_said_with_its_lane(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "good.yaml", {"swarm": {"lanes": {
        "api": {"allowed_paths": ["api/"], "agent": "codex"},
        "web": {"allowed_paths": ["web/"], "agent": "claude-code", "model": "anthropic:claude-sonnet-4-5"},
        "docs": {"allowed_paths": ["docs/"], "agent": {"acp": ["my-agent", "--acp"]}},
        "core": {"allowed_paths": ["core/"]}}}})
    config, findings = read_lanes_file(path)
    lanes = config.swarm.lanes
    assert [lanes[n].agent_name for n in ("api", "web", "docs", "core")] == ["codex", "claude-code", "acp", "builtin"]
    assert lanes["docs"].agent.acp == ["my-agent", "--acp"]  # type: ignore[union-attr]
    # the proposal's table says which agent each lane runs
    table = rows(LaneProposal(lanes=lanes))
    at = COLUMNS.index("agent")
    assert {r[0]: r[at] for r in table} == {"api": "codex", "web": "claude-code", "docs": "acp: my-agent --acp",
                                            "core": "builtin"}
    # a wrong value: one line naming the lane and the field
    said = lanes_error(tmp_path, {"api": {"allowed_paths": ["api/"], "agent": "claude"}})
    assert said.endswith("swarm.lanes.api.agent: 'claude' is not an agent: one of builtin, claude-code, codex, or "
                         "{acp: [command, args...]}"), said
    said = lanes_error(tmp_path, {"web": {"allowed_paths": ["web/"], "agent": {"acp": []}}})
    assert "swarm.lanes.web.agent: acp: [] is not a command" in said, said
    said = lanes_error(tmp_path, {"web": {"allowed_paths": ["web/"], "agent": {"acp": ["x"], "env": 1}}})
    assert "swarm.lanes.web.agent:" in said and "is not an agent" in said, said


def _no_planted(text: str) -> None:
    for value in PLANTED.values():
        assert value not in text


@pytest.fixture
def fake_providers(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The worker's providers are the fakes, with planted keys (the proxy sends them on; no agent sees them)."""
    def start(messages_script: Any, responses_script: Any) -> tuple[FakeMessages, FakeResponses]:
        messages, responses = FakeMessages(messages_script).start(), FakeResponses(responses_script).start()
        started.extend([messages, responses])
        monkeypatch.setenv("ANTHROPIC_BASE_URL", messages.base_url)
        monkeypatch.setenv("OPENAI_BASE_URL", responses.base_url)
        for name, value in PLANTED.items():
            monkeypatch.setenv(name, value)
        return messages, responses

    started: list[Any] = []
    yield start
    for server in started:
        server.stop()


def _claude_turns(turns: list[Said], closing: str) -> Any:
    """Claude Code's script by the tool results its request carries (a resumed session carries the earlier ones)."""
    def script(body: dict[str, Any]) -> Said:
        n = len(tool_results(body))
        return turns[n] if n < len(turns) else [Text(closing)]
    return script


@pytest.mark.usefixtures("worker")
async def test_a_claude_code_lane_and_a_codex_lane_deliver_one_branch(client: Any, tmp_path: Path,
                                                                      fake_providers: Any,
                                                                      reposwarm_home: Path) -> None:
    """A Claude Code lane, a Codex lane and a built-in lane in one run: one branch with every lane's work, each
    lane's usage, the gate's verdict per test."""
    _cli_or_skip("claude-code")
    _cli_or_skip("codex")
    began = time.monotonic()
    repo = make_repo(tmp_path / "repo", {
        "api/__init__.py": "", "api/app.py": "VERSION = 1\n", "web/page.txt": "old page\n",
        "README.md": "a repository\n", "docs/version.md": "1\n", "tests/__init__.py": "",
        "tests/test_app.py": "import unittest\n\nimport api.app\n\n\nclass T(unittest.TestCase):\n"
                             "    def test_version_is_a_number(self):\n"
                             "        self.assertIsInstance(api.app.VERSION, int)\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"api": {"allowed_paths": ["api/"], "agent": "codex", "max_turns": 8},
                            "web": {"allowed_paths": ["web/"], "agent": "claude-code", "max_turns": 8},
                            "docs": {"allowed_paths": ["docs/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-m", "unittest", "discover", "-s",
                                                              "tests", "-t", "."]],
                                                "timeout_s": 60}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "api/app.py exports VERSION; web/page.txt says it.",
                                               "lanes": [{"lane": "api", "goal": "Set VERSION to 2 in api/app.py."},
                                                         {"lane": "web", "goal": "Say version 2 in web/page.txt."},
                                                         {"lane": "docs", "goal": "Say 2 in docs/version.md."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"docs": {1: [
        {"tool_calls": [{"id": "d1", "name": "write_file", "arguments": {
            "path": "docs/version.md", "content": "2\n", "reason": "The version is 2 now"}}]},
        {"tool_calls": [{"id": "d2", "name": "finish", "arguments": {"summary": "docs/version.md says 2"}}]}]}}})
    patch = ("*** Begin Patch\n*** Update File: api/app.py\n@@\n-VERSION = 1\n+VERSION = 2\n*** End Patch\n")
    claude = _claude_turns([
        [Text("Looking first."), Call("Bash", {"command": "env; printf 'version 2\\n' > web/page.txt",
                                               "description": "look and write"})],
    ], closing="web/page.txt says version 2.")
    codex = responses_turns([
        # a write outside its slice (README.md), which reposwarm reverts and reports
        [Call("exec_command", {"cmd": "env; echo taken over > README.md"})],
        [Call("apply_patch", {"input": patch})],
    ], closing="VERSION is 2 in api/app.py.")
    messages, responses = fake_providers(claude, codex)

    run_id = await start_run(client, repo, lanes, script, plan=plan, task="Bump the version to 2")
    status = await wait_for_phase(client, run_id, Phase.review, timeout=RUN_LIMIT_S)
    by_lane = {lane.lane: lane for lane in status.review.lanes}
    api, web, docs = by_lane["api"], by_lane["web"], by_lane["docs"]
    assert (api.status, web.status, docs.status) == (LaneStatus.done,) * 3, (api.reason, web.reason, docs.reason)
    assert (api.agent, web.agent, docs.agent) == ("codex", "claude-code", "builtin")
    # the gate's verdict, per test: the merged tree's test ran and passed, judged against the base's
    report = status.review.test_report
    assert report is not None and report.passed and report.tests_run == 1 and report.base_tests_run == 1, report
    assert web.summary == "web/page.txt says version 2." and api.summary == "VERSION is 2 in api/app.py."
    assert {e.path for e in api.edits} == {"api/app.py"} and {e.path for e in web.edits} == {"web/page.txt"}
    # per-lane usage, counted by the proxy as the built-in loop counts its calls
    assert api.usage.model_calls >= 3 and web.usage.model_calls >= 2
    assert api.usage.input_tokens > 0 and web.usage.input_tokens > 0
    assert api.tool_calls == 2 and web.tool_calls == 1
    # the write outside the slice: reverted, and said in the lane's result and the ledger
    assert api.refusals == 1 and any("README.md" in line for line in api.failed_calls), api.failed_calls
    refused = [line for line in ledger.read(run_id) if line["event"] == "slice_refused" and line["lane"] == "api"]
    assert refused and "README.md" in refused[0]["detail"]
    sessions = {line["lane"]: line for line in ledger.read(run_id) if line["event"] == "agent_session"}
    assert sessions["api"]["agent"] == "codex" and sessions["web"]["agent"] == "claude-code"
    proxied = [line for line in ledger.read(run_id) if line["event"] == "model_call" and line.get("via") == "proxy"]
    assert {line["agent"] for line in proxied} == {"api", "web"}
    # status and the review's Markdown say which agent each lane ran
    # (a built-in lane names no agent in status)
    assert {lane.lane: lane.agent for lane in status.lanes} == {"api": "codex", "web": "claude-code", "docs": ""}
    markdown = (run_dir(run_id) / "review" / "latest.md").read_text()
    assert "Agent: codex" in markdown and "Agent: claude-code" in markdown
    # the Web UI's details line of each lane's workflow (warm: still there) names its agent
    for lane in status.lanes:
        if not lane.agent:
            continue
        meta = await client.get_workflow_handle(lane.workflow_id).query("__temporal_workflow_metadata",
                                                                         result_type=WorkflowMetadata)
        assert f"**{lane.lane}** (round 1, agent {lane.agent}): session" in meta.current_details, meta
    shown = await cli(client, reposwarm_home, "status", run_id)
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[0]: line for line in shown.stdout.splitlines() if line.startswith("  ") and line.split()}
    assert "agent codex" in lines["api"] and "agent claude-code" in lines["web"], shown.stdout

    result = await approve_and_wait(client, run_id, timeout=RUN_LIMIT_S)
    branch = f"swarm/{run_id}"
    assert git(repo, "show", f"{branch}:api/app.py") == "VERSION = 2"
    assert git(repo, "show", f"{branch}:web/page.txt") == "version 2"
    assert git(repo, "show", f"{branch}:README.md") == "a repository"
    assert git(repo, "show", f"{branch}:docs/version.md") == "2"
    assert result is not None

    # what each agent's shell saw of its environment: its lane token, never the worker's keys
    looked_web = str(tool_results(messages.model_requests()[1].body)[0]["content"])
    looked_api = str(function_outputs(responses.model_requests()[1].body)[0]["output"])
    assert "ANTHROPIC_API_KEY=rsw-lane-" in looked_web and "REPOSWARM_AGENT_TOKEN=rsw-lane-" in looked_api
    for seen in (looked_web, looked_api, json.dumps([r.body for r in messages.requests + responses.requests]),
                 ledger.ledger_path(run_id).read_text()):
        _no_planted(seen)
    # the providers got the worker's key, from the proxy alone
    assert {r.headers.get("x-api-key") for r in messages.model_requests()} == {PLANTED["ANTHROPIC_API_KEY"]}

    report = await cli(client, reposwarm_home, "report", run_id)
    assert report.returncode == 0, report.stderr
    rows_of = {line.split()[0]: line.split() for line in report.stdout.splitlines() if line.split()
               and line.split()[0] in ("api", "web")}
    # lane, runs, seconds, calls, tokens in...: the proxy's calls counted per lane, as the built-in loop's
    assert int(rows_of["api"][3]) == api.usage.model_calls and int(rows_of["web"][3]) == web.usage.model_calls, \
        report.stdout
    took = time.monotonic() - began
    print(f"two agent lanes, review and delivery: {took:.1f}s")
    assert took < RUN_LIMIT_S * 2


BREAK_MUL = "sed -i 's/return a \\* b/return a * b + 1/' calc/ops.py"
FIX_MUL = ("sed -i 's/return a \\* b + 1/return a * b/' calc/ops.py && "
           "printf '\\n\\ndef sub(a, b):\\n    return a - b\\n' >> calc/ops.py")
MUL_CHECK = "import calc.ops as o; r = o.mul(2, 3); assert r == 6, f'mul(2, 3) is {r}'"
NEXT = "Next assignment for lane calc (round 1, dispatch 2)"


@pytest.mark.usefixtures("worker")
@pytest.mark.parametrize("agent", ["claude-code", "codex"])
async def test_a_failing_check_s_repair_reaches_the_agent_s_own_session(agent: str, client: Any, tmp_path: Path,
                                                                        fake_providers: Any) -> None:
    """The gate treats the agent's work as any lane's: the test it broke is sent back to it, and the repair is its
    next assignment, in the same session resumed (`claude --resume`, `codex exec resume`: its earlier turns sent
    again)."""
    _cli_or_skip(agent)
    began = time.monotonic()
    from tests.test_validation import lanes_yaml, plan, repo_with_tests

    repo = repo_with_tests(tmp_path)
    # (one quick command, judged as one check: pytest's start in the sandbox would double the test's time)
    lanes = lanes_yaml(tmp_path, commands=[[sys.executable, "-c", MUL_CHECK]], timeout=60)
    config = json.loads(json.dumps(__import__("yaml").safe_load(lanes.read_text())))
    config["swarm"]["lanes"]["calc"].update(agent=agent, max_turns=6)
    write_yaml(lanes, config)
    claude = agent == "claude-code"
    conversation = (lambda body: body["messages"]) if claude else (lambda body: body["input"])
    answered = tool_results if claude else function_outputs

    def shell(command: str) -> Call:
        return Call("Bash", {"command": command, "description": "edit"}) if claude else \
            Call("exec_command", {"cmd": command})

    def script(body: dict[str, Any]) -> Said:
        said, n = json.dumps(conversation(body)), len(answered(body))
        if NEXT in said:  # the repair: the same session, its first turn's call and result carried
            return [shell(FIX_MUL)] if n == 1 else [Text("mul fixed, sub added")]
        return [shell(BREAK_MUL)] if n == 0 else [Text("sub added (or so I think)")]

    messages, responses = fake_providers(script, script)
    run_id = await start_run(client, repo, lanes, write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {}}),
                             plan=plan(tmp_path), task="Add sub")
    status = await wait_for_phase(client, run_id, Phase.review, timeout=RUN_LIMIT_S * 2)
    assert status.review.test_report.passed, status.review.test_report.failures
    calc = status.review.lanes[0]
    assert calc.agent == agent and calc.summary == "mul fixed, sub added"
    assert status.lanes[0].attempt == 2 and len(calc.passes) == 2  # the first pass, then the repair
    asked = (messages if claude else responses).model_requests()
    repair = [r.body for r in asked if NEXT in json.dumps(conversation(r.body))]
    assert repair, "the repair never reached the agent"
    first = json.dumps(conversation(repair[0]))
    # its own session: the first goal, its earlier call, and the failure it is answerable for
    assert "Goal for lane calc:" in first and "sed -i" in first and len(answered(repair[0])) == 1
    assert "mul(2, 3) is 7" in first
    sessions = [line for line in ledger.read(run_id) if line["event"] == "agent_session"]
    assert len(sessions) == 2 and sessions[1]["resumed"] and sessions[0]["session_id"] == sessions[1]["session_id"]
    assert git(repo, "show", f"swarm/{run_id}/calc:calc/ops.py").endswith("def sub(a, b):\n    return a - b")
    took = time.monotonic() - began
    print(f"a repair through the {agent} session: {took:.1f}s")
    assert took < RUN_LIMIT_S * 2


def _asked(api: str, body: dict[str, Any]) -> str:
    """A request as the model proxy tells requests apart (its record's key): less who asks and which process."""
    return request_hash(api, "", {}, body)


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
async def test_a_worker_killed_mid_session_resumes_the_agent_and_asks_the_provider_nothing_twice(
        agent: str, client: Any, temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL the worker while the agent waits for its second model call: the activity's retry, on a second
    worker of the same home, resumes the agent's session (its id from the heartbeat) on the worktree as it was
    left, and the lane finishes with both turns' work. No request reaches the provider twice."""
    _cli_or_skip(agent)
    began = time.monotonic()
    held, release = threading.Event(), threading.Event()
    claude = agent == "claude-code"
    answered = tool_results if claude else function_outputs

    def shell(command: str) -> Call:
        return Call("Bash", {"command": command, "description": "write"}) if claude else \
            Call("exec_command", {"cmd": command})

    def script(body: dict[str, Any]) -> Said:
        n = len(answered(body))
        if n == 0:
            return [shell("printf 'one\\n' > notes/a.txt")]
        if n == 1:
            if not held.is_set():  # the first time only: the worker dies while this call waits
                held.set()
                release.wait(60)
            return [shell("printf 'two\\n' > notes/b.txt")]
        return [Text("wrote notes/a.txt and notes/b.txt")]

    queue, home = f"agent-kill-{uuid.uuid4().hex[:6]}", tmp_path / "worker-home"
    repo = make_repo(tmp_path / "repo", {"notes/README.md": "notes\n", "src/app.py": "print('app')\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {
        "notes": {"allowed_paths": ["notes/"], "agent": agent, "max_turns": 6}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "none", "lanes": [
        {"lane": "notes", "goal": "Write notes/a.txt and notes/b.txt."}]})
    with FakeMessages(script) as messages, FakeResponses(script) as responses:
        env = {"ANTHROPIC_BASE_URL": messages.base_url, "OPENAI_BASE_URL": responses.base_url, **PLANTED}
        first = WorkerProcess(temporal_address, queue, home, env).start()
        second = WorkerProcess(temporal_address, queue, home, env)
        try:
            await first.ready()
            monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
            run_id = await start_run(client, repo, lanes, write_yaml(tmp_path / "replay.yaml", {"version": 1}),
                                     plan=plan, task="Write two notes")
            assert await asyncio.to_thread(held.wait, RUN_LIMIT_S), "the session never reached its second call"
            assert first.proc is not None
            # (the SDK sends an activity's heartbeat details at most once a second: the last beat reaches the
            # server within that second, and a kill sooner loses the last second's details)
            await asyncio.sleep(1.5)
            os.killpg(first.proc.pid, signal.SIGKILL)
            first.proc.wait(30)
            # the session's first turn was committed as it went: on the lane's branch before the kill
            assert git(repo, "show", f"swarm/{run_id}/notes:notes/a.txt") == "one"
            release.set()
            await second.start().ready()
            status = await wait_for_phase(client, run_id, Phase.review, timeout=RUN_LIMIT_S)
        finally:
            release.set()
            for worker in (first, second):
                if worker.proc is not None and worker.proc.poll() is None:
                    os.killpg(worker.proc.pid, signal.SIGKILL)
                    worker.proc.wait(30)
        asked = [_asked(ANTHROPIC if claude else RESPONSES, r.body)
                 for r in (messages if claude else responses).model_requests()]
        sent = json.dumps([r.body for r in messages.requests + responses.requests])
    lane = status.review.lanes[0]
    assert lane.status == LaneStatus.done, lane.reason
    assert lane.summary == "wrote notes/a.txt and notes/b.txt"
    assert {e.path for e in lane.edits} == {"notes/a.txt", "notes/b.txt"}
    assert git(repo, "show", f"swarm/{run_id}/notes:notes/b.txt") == "two"
    # the retry resumed the session the killed attempt heartbeat, and nothing was asked of the provider twice
    lines = [line for line in home_ledger(home) if line.get("run") == run_id]
    sessions = [line for line in lines if line["event"] == "agent_session"]
    assert len(sessions) == 1 and sessions[0]["resumed"] and sessions[0]["after_restart"], sessions
    assert sessions[0]["attempt"] == 2
    # the lane's usage counts the killed attempt's calls too (its heartbeat carried them), as the ledger does
    answered = [line for line in lines if line["event"] == "model_call" and line["outcome"] == "ok"]
    assert lane.usage.model_calls == len(answered) >= 3, (lane.usage, len(answered))
    repeated = len(asked) - len(set(asked))
    print(f"provider calls: {len(asked)}, asked twice: {repeated}; killed and resumed in "
          f"{time.monotonic() - began:.1f}s")
    assert repeated == 0
    # the first turn; the one in flight at the kill (answered to no one); the resumed session's two
    assert len(asked) == 4
    _no_planted(sent + json.dumps(lines))
    assert time.monotonic() - began < RUN_LIMIT_S * 2


@pytest.mark.usefixtures("worker")
async def test_an_agent_at_its_budget_pauses_the_lane_and_a_raise_resumes_its_session(
        client: Any, tmp_path: Path, fake_providers: Any) -> None:
    """The proxy refuses the agent's call past the lane's token budget; the session ends, the lane pauses and asks
    as a built-in lane does, and the raise (`reposwarm budget`'s Update) resumes the same session."""
    _cli_or_skip("claude-code")
    began = time.monotonic()

    def script(body: dict[str, Any]) -> Said:
        n = len(tool_results(body))
        if n < 2:
            name = "ab"[n]
            return [Call("Bash", {"command": f"printf '{name}\\n' > notes/{name}.txt", "description": name})]
        return [Text("wrote both notes")]

    messages, _ = fake_providers(script, responses_turns([]))
    repo = make_repo(tmp_path / "repo", {"notes/README.md": "notes\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"budget_wait_s": 120, "lanes": {
        "notes": {"allowed_paths": ["notes/"], "agent": "claude-code", "token_budget": 25, "max_turns": 6}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "none", "lanes": [
        {"lane": "notes", "goal": "Write notes/a.txt and notes/b.txt."}]})
    run_id = await start_run(client, repo, lanes, write_yaml(tmp_path / "replay.yaml", {"version": 1}), plan=plan)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    for _ in range(600):
        status = await handle.query(SwarmWorkflow.status)
        if status.paused:
            break
        await asyncio.sleep(0.1)
    assert status.paused and status.paused[0].lane == "notes" and status.paused[0].what == "tokens"
    asked_before = len(messages.model_requests())
    receipt = await handle.execute_update(SwarmWorkflow.budget, BudgetChange(lane="notes", add_tokens=1_000_000))
    assert not receipt.stopped
    status = await wait_for_phase(client, run_id, Phase.review, timeout=RUN_LIMIT_S)
    lane = status.review.lanes[0]
    assert lane.status == LaneStatus.done and lane.summary == "wrote both notes", lane.reason
    assert {e.path for e in lane.edits} == {"notes/a.txt", "notes/b.txt"}
    sessions = [line for line in ledger.read(run_id) if line["event"] == "agent_session"]
    assert len(sessions) == 2 and sessions[0]["budget_refused"] >= 1 and sessions[1]["resumed"]
    assert sessions[0]["session_id"] == sessions[1]["session_id"]
    # the refused call never reached the provider; after the raise, the session went on from where it stopped
    assert asked_before == 1 and len(messages.model_requests()) == 3
    assert "budget was raised" in json.dumps(messages.model_requests()[1].body["messages"])
    took = time.monotonic() - began
    print(f"a budget pause through the proxy, raised, resumed: {took:.1f}s; sessions "
          f"{[(s['seconds'], s['budget_refused']) for s in sessions]} (seconds, calls refused)")
    assert took < RUN_LIMIT_S


ACP_AGENT = (Path(__file__).parent / "fake_acp_agent.py").read_text()  # tests/test_agent_acp.py's agent


@pytest.mark.usefixtures("worker")
async def test_an_acp_lane_and_a_builtin_lane_deliver_their_work(client: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`agent: {acp: [command, args...]}`: an agent of our own speaking the Agent Client Protocol (its model Chat
    Completions through the worker's proxy) does its lane's work beside a built-in lane; a write it asks outside its
    slice is refused before it happens."""
    from tests.fake_models import FakeModelServer

    if (why := sandbox_status()) is not None:
        pytest.skip(f"agent sessions run in the checks' sandbox, and here: {why}")
    began = time.monotonic()
    repo = make_repo(tmp_path / "repo", {"docs/a.md": "a\n", "api/app.py": "VERSION = 1\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {
        "docs": {"allowed_paths": ["docs/"], "agent": {"acp": [sys.executable, "-I", "-c", ACP_AGENT]}},
        "api": {"allowed_paths": ["api/"]},
        "misc": {"allowed_paths": ["misc/"], "agent": {"acp": ["no-such-acp-agent", "--stdio"]}}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "none", "lanes": [
        {"lane": "docs", "goal": "Document version 2."}, {"lane": "api", "goal": "Set VERSION to 2."},
        {"lane": "misc", "goal": "Tidy misc/."}]})
    call = {"id": "c1", "name": "write_file", "arguments": {"path": "api/app.py", "content": "taken over\n"}}
    script = {"version": 1, "lanes": {
        "docs": {1: [{"tool_calls": [call]},
                     {"tool_calls": [{"id": "c2", "name": "write_file",
                                      "arguments": {"path": "docs/a.md", "content": "version 2\n"}}]},
                     {"content": "docs/a.md says version 2."}]},
        "api": {1: [{"tool_calls": [{"id": "w1", "name": "write_file", "arguments": {
                    "path": "api/app.py", "content": "VERSION = 2\n", "reason": "Set VERSION to 2 as the goal says"}}]},
                    {"tool_calls": [{"id": "f1", "name": "finish", "arguments": {"summary": "VERSION is 2"}}]}]}}}
    with FakeModelServer("openai", script) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", PLANTED["OPENAI_API_KEY"])
        run_id = await start_run(client, repo, lanes, write_yaml(tmp_path / "replay.yaml", script), plan=plan)
        status = await wait_for_phase(client, run_id, Phase.review, timeout=RUN_LIMIT_S)
    by_lane = {lane.lane: lane for lane in status.review.lanes}
    docs, api = by_lane["docs"], by_lane["api"]
    assert docs.status == LaneStatus.done and docs.agent == "acp", docs.reason
    assert docs.summary == "docs/a.md says version 2." and {e.path for e in docs.edits} == {"docs/a.md"}
    assert docs.usage.model_calls == 3 and docs.tool_calls >= 1
    assert api.status == LaneStatus.done and api.agent == "builtin"
    # an ACP command that is not there: its lane ends failed, saying so, and the others go on
    assert by_lane["misc"].status == LaneStatus.failed and "no-such-acp-agent" in by_lane["misc"].reason, \
        by_lane["misc"].reason
    assert git(repo, "show", f"swarm/{run_id}/docs:api/app.py") == "VERSION = 1"  # refused before it happened
    assert git(repo, "show", f"swarm/{run_id}/docs:docs/a.md") == "version 2"
    assert "outside" in json.dumps([m for r in fake.requests for m in r.body.get("messages", [])
                                    if m.get("role") == "tool"])
    _no_planted(ledger.ledger_path(run_id).read_text())
    assert time.monotonic() - began < RUN_LIMIT_S


def test_watch_names_an_agent_lane_s_agent() -> None:
    """`watch`'s one-line view (off a terminal): an outside agent's lane says its agent, a built-in one as before."""
    from types import SimpleNamespace

    from reposwarm.cli.live import line
    from reposwarm.contracts import LaneState, SwarmStatus

    status = SwarmStatus.model_construct(run_id="r", phase=Phase.running_lanes, round=1, provider_wait="", paused=[],
                                         lanes=[LaneState(lane="api", agent="codex", state="running",
                                                          step="codex session"),
                                                LaneState(lane="core", state="done")])
    assert line(SimpleNamespace(status=status)) == "[running_lanes r1] api[codex]:running(codex session)  core:done"

"""A model provider's outage in the middle of a run (issue 19): the run waits it out and delivers.

The fake OpenAI-wire server answers 503 to every request for OUTAGE_S (70 s) once the run is under way, saying
Retry-After: 5 as a proxy in front of a provider down for maintenance does: past the old retry budget, which gave up
after six attempts (here 25 s; about a minute where no Retry-After is said), so every lane failed. The run waits,
says "waiting for openai since ..." once for the run, and ends delivered with every lane merged and no completed turn
asked twice. A failure that is not an outage (an unknown model: 404) still fails a lane at once, with its message.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from reposwarm.contracts import LaneStatus, Phase, ReviewDecision
from tests.fake_models import FakeModelServer
from tests.helpers import ROOT, WorkerProcess, finish, git, make_repo, turn, write_yaml
from workflows.swarm import SwarmWorkflow

# Each lane's retries come every RETRY_AFTER_S (the provider's Retry-After overrides the policy's backoff:
# reposwarm/models/outage.py), so the first attempt after the outage finds it over within RETRY_AFTER_S, where the
# policy's own backoff (1, 3, 7, 15, 31, 63, 123 s into it) would wait for the attempt at 123 s. The outage still
# outlasts the old budget however it counted: 6 attempts, 25 s apart by Retry-After, 62 s by its backoff from 2 s
# (a call that gave up there would leave its lane failed at review, and the run still saying it waits); the
# mid-outage look comes at about 45 s, past the sixth attempt, with 25 s to spare.
OUTAGE_S = 70
RETRY_AFTER_S = 5
LOOK_S = 45

pytestmark = pytest.mark.timeout(600)


def setup(tmp_path: Path) -> tuple[Path, Path, Path, dict]:
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n", "web/client.js": "export const v = 1;\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"max_parallel": 2, "lanes": {"api": {"allowed_paths": ["api/"]},
                                               "web": {"allowed_paths": ["web/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", "import api.app"]],
                                                "timeout_s": 60}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {
        "interface_contract": "api/app.py exports NAME.",
        "lanes": [{"lane": "api", "goal": "Add NAME to api/app.py."},
                  {"lane": "web", "goal": "Bump the client's version in web/client.js."}]})
    script = {"lanes": {
        "api": {1: [turn(("a1", "read_file", {"path": "api/app.py"})),
                    turn(("a2", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n",
                                              "new": "VERSION = 1\nNAME = 'swarm'\n",
                                              "reason": "Add NAME as the contract says"})),
                    finish("a3", "added NAME")]},
        "web": {1: [turn(("w1", "read_file", {"path": "web/client.js"})),
                    turn(("w2", "write_file", {"path": "web/client.js", "content": "export const v = 2;\n",
                                               "reason": "Bump the client version"})),
                    finish("w3", "bumped")]}}}
    return repo, lanes, plan, script


# what a proxy (nginx) in front of a provider answers while the provider is down: not the provider's JSON
PROXY_PAGE = ("<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n<body>\r\n"
              "<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n<hr><center>nginx</center>\r\n"
              "</body>\r\n</html>\r\n")


def asked(fake: FakeModelServer) -> Counter:
    """(lane, turn) of every request answered: a turn asked twice would count 2."""
    counts: Counter = Counter()
    for body in fake.answered:
        messages = [m for m in body["messages"] if m["role"] != "system"]
        lane = messages[0]["content"].split("Goal for lane ")[1].split(":")[0]
        counts[(lane, sum(1 for m in messages if m["role"] == "assistant"))] += 1
    return counts


def starter(address: str, queue: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "starter.py"), *args], capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "TEMPORAL_ADDRESS": address,
                                            "REPOSWARM_TASK_QUEUE": queue, "HOME": "/tmp"})


async def test_a_provider_outage_past_the_old_retry_budget_mid_run_ends_delivered(client, temporal_address,
                                                                                  tmp_path):
    queue = f"outage-{uuid.uuid4().hex[:6]}"
    repo, lanes, plan, script = setup(tmp_path)
    with FakeModelServer("openai", script, outage_after=2, outage_s=OUTAGE_S, outage_page=PROXY_PAGE,
                         outage_retry_after=str(RETRY_AFTER_S)) as fake:
        worker = WorkerProcess(temporal_address, queue, tmp_path / "home",
                               env={"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "test-key"}).start()
        try:
            await worker.ready()
            started = starter(temporal_address, queue, "run", "--repo", str(repo), "--task", "Add NAME",
                              "--lanes", str(lanes), "--plan", str(plan), "--model", "openai:gpt-test")
            assert started.returncode == 0, started.stderr
            run_id = started.stdout.split()[1]
            handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)

            # Mid-outage: the run says it waits, once, and no lane has failed.
            deadline = time.monotonic() + 120
            while not fake.refused or not (await handle.query(SwarmWorkflow.status)).provider_wait:
                assert time.monotonic() < deadline, "the run never said it was waiting for the provider"
                await asyncio.sleep(1)
            await asyncio.sleep(LOOK_S)  # past the old retry budget (6 attempts)
            status = await handle.query(SwarmWorkflow.status)
            assert fake.in_outage(), "the outage was over before the mid-outage look"
            assert status.provider_wait.startswith("waiting for openai since ")
            assert "503" in status.provider_wait and f"next in {RETRY_AFTER_S} s" in status.provider_wait
            retry = re.search(r"\(retry (\d+),", status.provider_wait)
            assert retry and int(retry[1]) > 6, status.provider_wait  # more attempts than the old budget had
            # the proxy's HTML page is its title on one line, in status and in the Web UI's details alike
            assert "503 Service Temporarily Unavailable" in status.provider_wait, status.provider_wait
            assert "<" not in status.provider_wait and "\n" not in status.provider_wait, status.provider_wait
            assert all(lane.state != "failed" for lane in status.lanes), status.lanes
            shown = starter(temporal_address, queue, "status", run_id)
            assert shown.stdout.count("waiting for openai since") == 1, shown.stdout
            metadata = await client.get_workflow_handle(run_id).query("__temporal_workflow_metadata")
            assert "waiting for openai since" in str(metadata)

            deadline = time.monotonic() + OUTAGE_S + 150
            while (status := await handle.query(SwarmWorkflow.status)).phase != Phase.review:
                assert time.monotonic() < deadline, f"no review after the outage: {status.phase}"
                await asyncio.sleep(2)
            assert fake.refused >= 10  # it was down, and asked again and again
            assert not status.provider_wait  # answered again: said no more
            assert {lane.lane: lane.status for lane in status.review.lanes} == {"api": LaneStatus.done,
                                                                                "web": LaneStatus.done}
            assert all(n == 1 for n in asked(fake).values()), asked(fake)  # no completed turn asked twice
            await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ann"))
            result = await handle.result()
        finally:
            worker.stop()
    assert git(repo, "show", f"{result.delivered_branch}:api/app.py") == "VERSION = 1\nNAME = 'swarm'"
    assert git(repo, "show", f"{result.delivered_branch}:web/client.js") == "export const v = 2;"


async def test_an_unknown_model_fails_its_lane_at_once_with_its_message(client, temporal_address, tmp_path):
    queue = f"nomodel-{uuid.uuid4().hex[:6]}"
    repo, lanes, plan, _ = setup(tmp_path)
    # No script at all: the fake answers 404 "no route" for a wrong base URL path, which the provider reads as an
    # unknown model or base URL: not an outage, so not retried.
    with FakeModelServer("openai", {"lanes": {}}) as fake:
        worker = WorkerProcess(temporal_address, queue, tmp_path / "home",
                               env={"OPENAI_BASE_URL": fake.base_url + "/wrong", "OPENAI_API_KEY": "k"}).start()
        try:
            await worker.ready()
            began = time.monotonic()
            started = starter(temporal_address, queue, "run", "--repo", str(repo), "--task", "x", "--lanes",
                              str(lanes), "--plan", str(plan), "--model", "openai:gpt-test")
            run_id = started.stdout.split()[1]
            handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
            while (status := await handle.query(SwarmWorkflow.status)).phase != Phase.review:
                assert time.monotonic() - began < 60, status.phase
                await asyncio.sleep(0.5)
            assert all(lane.status == LaneStatus.failed for lane in status.review.lanes)
            assert all("unknown model or wrong base URL" in lane.reason for lane in status.review.lanes)
            assert len(fake.requests) == 2  # one request per lane: not retried
            assert not status.provider_wait
            await handle.terminate("test done")
        finally:
            worker.stop()
    assert json.dumps(status.model_dump(mode="json"))  # the status stays readable

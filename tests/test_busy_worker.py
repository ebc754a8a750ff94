"""A worker that polls but answers slowly is busy, not gone (issue 44's harness: on immer the worker's event loop
stalled past its heartbeat timeout while a check's scratch folder, a copy of the host's 30,000-file yarn cache, was
removed; the server retried the check beside the one still running, and `try` took one unanswered query for "no
worker is polling", stopped the worker it had started and left the run at validating).

The scratch folder is removed off the event loop: a check that fills it with 100,000 files leaves the loop free.

Real processes: the session's dev server, `worker.py` in a process of its own, `watch` as a user runs it. The worker
is stopped (SIGSTOP: alive, its poll still fresh on the server, answering nothing) while `watch` follows the run;
`watch` says once that the worker is busy and keeps following, where it used to end with "no worker is polling".
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid

import pytest

from reposwarm.checks import runner
from reposwarm.contracts import CheckProfile
from tests.fake_models import FakeModelServer
from tests.helpers import WorkerProcess, finish, make_repo
from tests.test_caches import _sandboxed  # noqa: F401 (autouse: the test's own REPOSWARM_HOME, sandbox on)
from tests.test_cli_waits import Cli, setup

pytestmark = pytest.mark.timeout(240)


async def test_watch_waits_for_a_worker_of_this_host_that_polls_but_does_not_answer(client, temporal_address,
                                                                                   tmp_path):
    queue = f"busy-{uuid.uuid4().hex[:6]}"
    # the lane's model answers in five minutes: the run stays at running_lanes, a worker answering for it
    with FakeModelServer("openai", {"lanes": {"api": {1: [finish("c1")]}}}, delay_s=300) as fake:
        repo, lanes, plan, model = setup(tmp_path, "openai:gpt-4.1")
        home = tmp_path / "cli"
        worker = WorkerProcess(temporal_address, queue, tmp_path / "worker-home", env={
            "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-busy-test-0123456789"}).start()
        assert worker.proc is not None
        try:
            await worker.ready()
            waiting = Cli(temporal_address, queue, home, "run", "--repo", str(repo), "--task", "Add NAME",
                          "--lanes", str(lanes), "--plan", str(plan), "--model", model, "--wait")
            waiting.next_line("stdout")  # "run: ID"
            assert waiting.next_line("stdout").startswith("web ui: ")
            line = ""
            while "running_lanes" not in line:  # (the run has its record on the server from then on)
                line = waiting.next_line("stdout")
            os.kill(worker.proc.pid, signal.SIGSTOP)  # alive and polled lately; answers nothing
            said = ""
            while "it is busy" not in said:
                said = waiting.next_line("stderr", deadline_s=60)
                assert "no worker is polling" not in said, said
            assert f"the worker (pid {worker.proc.pid}, this host) polls but has not answered in " in said, said
            assert waiting.proc.poll() is None  # still following the run
            os.kill(worker.proc.pid, signal.SIGCONT)
            code, told = waiting.interrupt()
            assert code == 130, told
            assert told.splitlines()[-1].startswith("interrupted: the run goes on: "), told
        finally:
            os.kill(worker.proc.pid, signal.SIGCONT)
            worker.stop()


async def test_a_check_s_scratch_folder_is_removed_off_the_event_loop(tmp_path):
    tree = make_repo(tmp_path / "repo", {"README.md": "x\n"})
    # (a validation's throwaway copy of the language caches is in the check's scratch folder: YARN_CACHE_FOLDER)
    fill = 'cd "$YARN_CACHE_FOLDER" && for d in $(seq 1 100); do mkdir d$d && (cd d$d && seq 1 1000 | xargs touch); done'
    profile = CheckProfile(commands=[["/bin/sh", "-c", fill]], timeout_s=240)
    lag = 0.0
    done = False

    async def ticking() -> None:
        nonlocal lag
        while not done:
            before = time.monotonic()
            await asyncio.sleep(0.05)
            lag = max(lag, time.monotonic() - before - 0.05)

    ticker = asyncio.create_task(ticking())
    report = await runner.run_profile(profile, tree, None, rerun=False)
    done = True
    await ticker
    assert report.commands[0].exit_code == 0, report.commands[0].output_tail
    assert lag < 0.5, f"the event loop stalled {lag:.2f} s"  # (removing 100,000 files on it: 1.5 s and more)

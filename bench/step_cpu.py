"""A lane step's CPU, as the bench reads it: the worker's (bench/cpu_probe.py, inside a `worker.py` process) and the
dev server's (its own metrics: the requests it served and the persistence operations they took).

bench/bench_swarm.py (parallel) takes both before and after each run and divides by the run's lane steps.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.cpu_probe import ENV  # noqa: E402
from tests.helpers import WorkerProcess  # noqa: E402


class ProbedWorker(WorkerProcess):
    """`worker.py` as WorkerProcess starts it, with the timers above: the same worker (its options from
    reposwarm/cli/worker.py), each timed call costing a microsecond or two more."""

    def start(self) -> ProbedWorker:
        self.snapshot_file = self.log.with_suffix(".cpu.json")
        self.env = {**self.env, ENV: str(self.snapshot_file)}
        self.proc = subprocess.Popen([sys.executable, "-c", "import bench.cpu_probe as p; p.main()"], cwd=ROOT,
                                     env=self.env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        return self

    async def snapshot(self, timeout: float = 10.0) -> dict[str, Any]:
        """The worker's counters now (it writes them when sent SIGUSR1)."""
        assert self.proc is not None
        asked = time.time()
        os.kill(self.proc.pid, signal.SIGUSR1)
        deadline = asked + timeout
        while time.time() < deadline:
            await asyncio.sleep(0.01)
            try:
                taken: dict[str, Any] = json.loads(self.snapshot_file.read_text())
            except (OSError, ValueError):
                continue
            if taken["time"] >= asked:
                return taken
        raise AssertionError(f"the worker wrote no CPU snapshot in {timeout} s: {self.log}")


def server_requests(metrics_port: int) -> dict[str, float]:
    """What the dev server has served so far, from its Prometheus metrics: its frontend's requests by operation
    (the workers' polls and completions, the bench's queries) and its persistence operations ("db:" and the
    operation: each history update, each history read)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("service_requests{") and 'service_name="frontend"' in line:
            name = line.split('operation="', 1)[1].split('"', 1)[0]
        elif line.startswith("persistence_requests{"):
            name = "db:" + line.split('operation="', 1)[1].split('"', 1)[0]
        else:
            continue
        out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def per_step(before: dict[str, float], after: dict[str, float], steps: int, least: float = 0.05) -> dict[str, float]:
    """after - before per step, largest first, leaving out what is under `least` a step."""
    out = {k: round((v - before.get(k, 0.0)) / steps, 2) for k, v in after.items()}
    return dict(sorted(((k, v) for k, v in out.items() if v >= least), key=lambda kv: -kv[1]))

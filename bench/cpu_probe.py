"""Where a worker's CPU goes, measured inside the worker: bench code, loaded into a `worker.py` process the bench starts.

`python -c "import bench.cpu_probe as p; p.main()"` runs reposwarm's worker (reposwarm/cli/worker.py, its options
from argv) with timers installed first, so every module that imports the timed functions gets the timed ones. On
SIGUSR1 the worker writes a snapshot (JSON) to $REPOSWARM_CPU_PROBE: the bench takes one before and one after a run,
and the difference over the run's lane steps is the split it reports (bench/bench_swarm.py, parallel).

Two views, both in CPU seconds:

- by thread, from /proc/self/task (each thread's user + system time): the event loop (the SDK's Python side, async
  activities such as the model call's HTTP), the workflow-task threads (activations), the activity pool (sync
  activities and local activities), the file-work pool (asyncio.to_thread), and the SDK's core (its Rust threads:
  gRPC, protobuf, the state machines); plus the git processes the worker started and reaped.
- by function, with time.thread_time() around synchronous calls, exclusive of timed calls nested in them: the
  workflow activations (workflow code and the SDK's Python around it), payload conversion (pydantic, to and from
  JSON payloads, wherever it happens), the ledger, the run's store and exactly-once records, the tools' own work,
  the model call's recording and kept reply, and spans (OpenTelemetry, when tracing is configured).

thread_time() counts only the calling thread, so a timed call is exact even with many threads; async functions
cannot be timed this way (other tasks run on the loop while they wait): what the loop does is its thread's time.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = "REPOSWARM_CPU_PROBE"
_TICK = os.sysconf("SC_CLK_TCK")
_totals: dict[str, float] = {}
_calls: dict[str, int] = {}
_local = threading.local()
_lock = threading.Lock()


def _timed(category: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn, its thread CPU added to `category`, less that of timed calls nested in it (counted in theirs)."""
    if getattr(fn, "_cpu_probe", None):
        return fn

    def timed(*args: Any, **kwargs: Any) -> Any:
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(0.0)  # CPU of the timed calls nested in this one
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            took = time.thread_time() - started
            nested = stack.pop()
            if stack:
                stack[-1] += took
            with _lock:
                _totals[category] = _totals.get(category, 0.0) + took - nested
                _calls[category] = _calls.get(category, 0) + 1

    timed._cpu_probe = True  # type: ignore[attr-defined]
    timed.__wrapped__ = fn  # type: ignore[attr-defined]
    return timed


def _wrap(owner: Any, name: str, category: str) -> None:
    if hasattr(owner, name):  # (an older revision may not have it: bench/step_cpu_pair.py times those too)
        setattr(owner, name, _timed(category, getattr(owner, name)))


def install() -> None:
    """The timers, on the SDK's and reposwarm's functions, before the worker imports them."""
    from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
    from temporalio.worker import _workflow

    from reposwarm.agent.tools import Toolbox
    from reposwarm.runs import exactly_once, ledger, recording, store

    _wrap(_workflow._RunningWorkflow, "activate", "workflow activations")
    _wrap(PydanticJSONPlainPayloadConverter, "to_payload", "payload conversion")
    _wrap(PydanticJSONPlainPayloadConverter, "from_payload", "payload conversion")
    for name in ("record", "record_activity", "record_part"):
        _wrap(ledger, name, "ledger")
    for name in ("put", "get", "put_json", "get_json"):
        _wrap(store.Store, name, "store")
    for name in ("recorded", "record"):
        _wrap(exactly_once.Once, name, "exactly-once records")
    _wrap(recording, "save", "model call recording")
    _wrap(Toolbox, "call", "tools")
    gc.callbacks.append(_gc_timer)
    try:
        from opentelemetry.sdk.trace import Span
    except ImportError:
        pass
    else:
        for name in ("end", "set_attributes", "set_attribute", "add_event"):
            _wrap(Span, name, "tracing")


def _gc_timer(phase: str, info: dict[str, Any]) -> None:
    """The garbage collector's passes, timed like a function (it runs in whichever thread allocated last)."""
    if phase == "start":
        _local.gc_started = time.thread_time()
        return
    took = time.thread_time() - getattr(_local, "gc_started", time.thread_time())
    stack = getattr(_local, "stack", None)
    if stack:
        stack[-1] += took
    category = f"garbage collection (generation {info.get('generation')})"
    with _lock:
        _totals[category] = _totals.get(category, 0.0) + took
        _calls[category] = _calls.get(category, 0) + 1


def _thread_kind(name: str) -> str:
    if name == "MainThread":
        return "event loop (SDK's Python side, async activities: the model call)"
    if name.startswith("temporal_workflow_"):
        return "workflow-task threads"
    if name.startswith("io_"):
        return "file-work pool (asyncio.to_thread)"
    if name.startswith("ThreadPoolExecutor"):
        return "activity pool (sync and local activities)"
    return "SDK core (Rust threads) and others"


def snapshot() -> dict[str, Any]:
    names = {t.native_id: t.name for t in threading.enumerate()}
    threads: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        kind = _thread_kind(names.get(int(task.name), ""))
        threads[kind] = threads.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / _TICK
    own = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    with _lock:
        functions, calls = dict(_totals), dict(_calls)
    return {"time": time.time(), "process_s": (int(own[11]) + int(own[12])) / _TICK,
            "children_s": (int(own[13]) + int(own[14])) / _TICK, "threads_s": threads,
            "functions_s": functions, "calls": calls}


def _dump(*_: object) -> None:
    target = Path(os.environ[ENV])
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(snapshot()))
    partial.replace(target)


def split(before: dict[str, Any], after: dict[str, Any], steps: int) -> dict[str, Any]:
    """The CPU between two snapshots, in milliseconds per lane step, by thread and by function."""
    def per_step(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        out = {k: round((b.get(k, 0.0) - a.get(k, 0.0)) * 1000 / steps, 2) for k in b}
        return dict(sorted(((k, v) for k, v in out.items() if v), key=lambda kv: -kv[1]))

    return {"process_ms": round((after["process_s"] - before["process_s"]) * 1000 / steps, 2),
            "children_ms": round((after["children_s"] - before["children_s"]) * 1000 / steps, 2),
            "by_thread_ms": per_step(before["threads_s"], after["threads_s"]),
            "by_function_ms": per_step(before["functions_s"], after["functions_s"]),
            "calls_per_step": {k: round((after["calls"].get(k, 0) - before["calls"].get(k, 0)) / steps, 2)
                               for k in after["calls"]}}


_profile: list[Any] = []


def _toggle_profile(*_: object) -> None:
    """SIGUSR2: start profiling the event loop's thread (cProfile, in thread CPU time); again: stop, and write
    the stats to $REPOSWARM_CPU_PROBE.prof."""
    import cProfile

    if not _profile:
        _profile.append(cProfile.Profile(time.thread_time))
        _profile[0].enable()
        return
    profiler = _profile.pop()
    profiler.disable()
    profiler.dump_stats(os.environ[ENV] + ".prof")


def main() -> None:
    install()
    signal.signal(signal.SIGUSR1, _dump)
    signal.signal(signal.SIGUSR2, _toggle_profile)
    from reposwarm.cli.worker import run

    code = run(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()

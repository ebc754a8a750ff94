"""Benchmark warm lanes against cold re-dispatch: the tokens and seconds of one repair, on the same scenario.

Why: a repair after a red check (or the next round after a rejection) used to start a fresh lane, which had to
read again everything it had read before. A warm lane goes on with its conversation. What that saves depends on
how much a lane reads before it can act; this scenario is a small, honest case: to change calc/ops.py the lane
reads the six modules it uses (about 2 KB each), then edits. Its first edit breaks a test; the gate sends the
failure back; the repair reads what it needs (cold: all of it again; warm: nothing it has seen) and fixes it.

The model is a fake on the OpenAI wire that behaves like an agent: it reads each module it needs unless the
module's text is already in the conversation it was sent, then edits, then finishes; it reports as input
tokens the size of what it was sent (4 characters a token, the product's own estimate), so the figures are
what a provider would bill. One run each, warm_lanes true and false, on a local dev server and a worker in this
process; the repair's figures are its requests' (those after the repair note reached the lane).

    python bench/bench_warm.py [--out bench/results_warm.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from reposwarm.cli.runs import build_request, start  # noqa: E402
from reposwarm.cli.worker import make_worker  # noqa: E402
from reposwarm.contracts import Phase  # noqa: E402
from tests.fake_models import FakeModelServer  # noqa: E402
from tests.helpers import make_repo, start_dev_server, wait_for_phase  # noqa: E402

MODULES = [f"calc/m{i}.py" for i in range(1, 7)]
REPAIR_NOTE = "The merged tree fails these checks"
OPS = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = ("import unittest\n\nfrom calc.ops import add, mul\n\n\nclass OpsTest(unittest.TestCase):\n"
         "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
         "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n")


def module_text(path: str) -> str:
    name = Path(path).stem
    body = "".join(f"def {name}_helper_{i}(x):\n    \"\"\"Helper {i} of {name}, which ops may use.\"\"\"\n"
                   f"    return x * {i} + {len(name)}\n\n\n" for i in range(20))
    return f"# module {name}: marker-{name}\n{body}"


class AgentLike(FakeModelServer):
    """Reads what it needs unless it has seen it, then edits, then finishes (see the module docstring)."""

    def reply_for(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = [m for m in body["messages"] if m["role"] != "system"]
        seen = "\n".join(str(m.get("content") or "") for m in messages if m["role"] == "tool")
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        current = messages[users[-1]:]  # this assignment's exchange
        repair = REPAIR_NOTE in str(messages[users[-1]].get("content"))
        called = [c["function"]["name"] for m in current if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        n = len(called)
        if missing := [p for p in MODULES if f"marker-{Path(p).stem}" not in seen]:
            call = ("read_file", {"path": missing[0]})
        elif "edit_file" not in called:
            old, new = ("return a * b + 1", "return a * b") if repair else ("return a * b", "return a * b + 1")
            call = ("edit_file", {"path": "calc/ops.py", "old": old, "new": new,
                                  "reason": "Change mul as the goal says, using the modules read"})
        else:
            call = ("finish", {"summary": "done"})
        sent = len(json.dumps(body["messages"])) // 4
        reply = {"content": "", "tool_calls": [{"id": f"c{len(messages)}-{n}", "name": call[0], "arguments": call[1]}],
                 "usage": {"input_tokens": sent, "output_tokens": 60}}
        return self._wire(reply, body["model"])


def setup(tmp: Path, warm: bool) -> tuple[Path, Path, Path]:
    repo = make_repo(tmp / "repo", {"calc/__init__.py": "", "calc/ops.py": OPS, "tests/__init__.py": "",
                                    "tests/test_ops.py": TESTS, **{p: module_text(p) for p in MODULES}})
    lanes = tmp / "lanes.yaml"
    lanes.write_text(yaml.safe_dump({
        "swarm": {"warm_lanes": warm, "lanes": {"calc": {"allowed_paths": ["calc/"], "read_only_paths": ["tests/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-m", "unittest", "-q"]],
                                                "timeout_s": 120}}}}))
    plan = tmp / "plan.yaml"
    plan.write_text(yaml.safe_dump({"interface_contract": "calc.ops keeps add and mul.", "lanes": [
        {"lane": "calc", "goal": "Rework mul in calc/ops.py using the helpers in calc/m1.py .. calc/m6.py."}]}))
    return repo, lanes, plan


async def one(client: Any, warm: bool) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="reposwarm-bench-warm-"))
    repo, lanes, plan = setup(tmp, warm)
    queue = f"bench-warm-{uuid.uuid4().hex[:6]}"
    os.environ["REPOSWARM_TASK_QUEUE"] = queue
    stamps: list[float] = []
    with AgentLike("openai", {"lanes": {}}, delay_s=0.5) as fake:  # a model answers in about half a second
        original = fake.reply_for

        def timed(body: dict[str, Any]) -> dict[str, Any]:
            stamps.append(time.monotonic())
            return original(body)

        fake.reply_for = timed  # type: ignore[method-assign]
        os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"] = fake.base_url, "sk-bench"
        async with make_worker(client, queue):
            req = build_request(argparse.Namespace(repo=str(repo), task="Rework mul", lanes=str(lanes),
                                                   plan=str(plan), model="openai:agent-like"))
            await start(client, req)
            status = await wait_for_phase(client, req.run_id, Phase.review, timeout=300)
            await client.get_workflow_handle(req.run_id).terminate("bench done")
    assert status.review is not None and status.review.test_report is not None
    bodies = fake.answered
    first_repair = next(i for i, b in enumerate(bodies) if REPAIR_NOTE in json.dumps(b["messages"][-1])
                        or any(REPAIR_NOTE in str(m.get("content")) for m in b["messages"] if m["role"] == "user"))
    repair = bodies[first_repair:]
    tokens = sum(len(json.dumps(b["messages"])) // 4 + 60 for b in repair)
    return {"warm": warm, "repaired_green": status.review.test_report.passed, "repair_calls": len(repair),
            "repair_tokens": tokens, "repair_s": round(stamps[-1] - stamps[first_repair], 2),
            "first_dispatch_calls": first_repair}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results_warm.json"))
    args = parser.parse_args()
    os.environ.setdefault("REPOSWARM_HOME", tempfile.mkdtemp(prefix="reposwarm-bench-home-"))
    env = await start_dev_server()
    try:
        cold = await one(env.client, warm=False)
        warm = await one(env.client, warm=True)
    finally:
        await env.shutdown()
    result = {"scenario": "one repair after a red check; the lane reads six ~2 KB modules before it edits",
              "cold": cold, "warm": warm,
              "warm_over_cold_tokens": round(warm["repair_tokens"] / cold["repair_tokens"], 3),
              "warm_over_cold_calls": round(warm["repair_calls"] / cold["repair_calls"], 3)}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"repair, cold: {cold['repair_calls']} calls, {cold['repair_tokens']:,} tokens, {cold['repair_s']} s")
    print(f"repair, warm: {warm['repair_calls']} calls, {warm['repair_tokens']:,} tokens, {warm['repair_s']} s")
    print(f"warm / cold tokens: {result['warm_over_cold_tokens']}  (target: at most 0.5)")


if __name__ == "__main__":
    asyncio.run(main())

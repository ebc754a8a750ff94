"""Recording a run's model exchanges, and turning them into a replay script.

With recording on, every model reply is saved under the run's folder as
`recording/<agent>/r<round>/t<turn>.json`, in the replay script's own reply
format (content, tool calls with the raw arguments the model sent, usage), so
`replay:<script>` plays the run back offline through the same code path.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from reposwarm.contracts.model import ModelReply
from reposwarm.runs.ledger import redact
from reposwarm.runs.store import run_dir


def _round_key(name: str) -> int | str:
    """Folder r3 is round 3; r3.2 is round 3, second dispatch of the lane (replay key "3.2")."""
    key = name[1:]
    return int(key) if key.isdigit() else key


def save(run_id: str, agent: str, round_no: int, turn: int, reply: ModelReply, *, attempt: int = 1) -> None:
    folder = f"r{round_no}" if attempt == 1 else f"r{round_no}.{attempt}"
    path = run_dir(run_id) / "recording" / agent / folder / f"t{turn}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {
        "content": reply.content,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.raw_arguments} for c in reply.tool_calls],
        "usage": {"input_tokens": reply.usage.input_tokens, "output_tokens": reply.usage.output_tokens},
        # how the reply ended, where it was not the usual: a cut reply played back is a cut reply again
        **({"stop_reason": reply.stop_reason} if reply.stop_reason else {}),
        **({"output_limit": reply.output_limit} if reply.output_limit else {}),
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(redact(json.dumps(entry, ensure_ascii=False)))
    os.replace(tmp, path)  # a retried call overwrites its own entry: one entry per (agent, round, turn)


def replay_script(run_id: str) -> dict[str, Any]:
    """The replay script of a recorded run (version 1)."""
    root = run_dir(run_id) / "recording"
    if not root.is_dir():
        raise FileNotFoundError(f"no recording of run {run_id} under {root} (was it started with --record, "
                                "and is REPOSWARM_HOME the worker's?)")
    script: dict[str, Any] = {"version": 1, "planner": {}, "converger": {}, "lanes": {}}

    def turns(folder: Path) -> list[dict[str, Any]]:
        files = sorted(folder.glob("t*.json"), key=lambda p: int(p.stem[1:]))
        return [json.loads(p.read_text(encoding="utf-8")) for p in files]

    for agent in sorted(p for p in root.iterdir() if p.is_dir()):
        for round_dir in sorted(agent.glob("r*"), key=lambda p: str(p.name)):
            key = _round_key(round_dir.name)
            if agent.name in ("planner", "converger"):
                script[agent.name][key] = turns(round_dir)
            elif agent.name == "proposer":  # a run that proposed its lanes (its round 0)
                script.setdefault("proposer", {})[key] = turns(round_dir)
            else:
                script["lanes"].setdefault(agent.name, {})[key] = turns(round_dir)
    return script

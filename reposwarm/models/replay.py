"""The replay model: plays back a recorded script of model replies.

Script format (YAML or JSON):

    version: 1
    planner:                 # replies for planning rounds that ask the model
      2: {content: '{"interface_contract": "...", "lanes": [...]}'}
      3: [{content: "not a plan"}, {content: '{...}'}]   # a list: one reply per turn
    converger:               # replies to merge conflicts, by round: one per conflict, in order
      1: [{tool_calls: [{id: r1, name: resolve, arguments: {files: [{path: a.py, content: "..."}], explanation: "..."}}]}]
    proposer:                # a run with no lanes file: the lanes it proposes (docs/lanes.md), one reply, or a
      - tool_calls:          # list: the second answers the problems of a refused first one (`{0: ...}` as well)
          - {id: p1, name: submit_lanes, arguments: {interface_contract: "...", summary: "...", overlaps: [],
             lanes: [{name: api, goal: "...", allowed_paths: [api/**], read_only_paths: [web/**], depends_on: []}]}}
    lanes:
      api_layer:
        1:                   # round
        "1.2": [...]         # round 1, second dispatch (the lane redoing its change after a conflict)
          - content: "optional text"
            tool_calls:
              - {id: call_1, name: read_file, arguments: {path: services/api/app.py}}
            usage: {input_tokens: 900, output_tokens: 40}
          - tool_calls: [{id: call_2, name: finish, arguments: {summary: "..."}}]

The reply is chosen from (agent, round, turn) alone, so a retried or replayed
activity gets the same answer: the replay model is as deterministic as a
recording should be. `arguments` may also be a string, played back verbatim
as the raw JSON a model sent (to replay malformed replies).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from reposwarm.contracts import Usage
from reposwarm.contracts.model import ModelReply, ModelRequest
from reposwarm.models import ModelError, tool_call


@lru_cache(maxsize=32)
def _load(path: str, mtime: float) -> dict[str, Any]:
    text = Path(path).read_text(encoding="utf-8")
    data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    if not isinstance(data, dict) or data.get("version") != 1:
        raise ModelError(f"replay script {path}: expected a mapping with version: 1", retryable=False)
    return data


def load_script(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ModelError(f"replay script {path} does not exist on this worker", retryable=False)
    return _load(str(p.resolve()), p.stat().st_mtime)


def _reply(raw: dict[str, Any], where: str) -> ModelReply:
    if not isinstance(raw, dict):
        raise ModelError(f"{where}: a reply must be a mapping with content and/or tool_calls", retryable=False)
    calls = []
    for i, call in enumerate(raw.get("tool_calls") or []):
        if not isinstance(call, dict) or "name" not in call:
            raise ModelError(f"{where}: tool call {i + 1} must be a mapping with a name", retryable=False)
        # a string is played back verbatim as the raw JSON the model sent (malformed, or nested too deep)
        calls.append(tool_call(call.get("id") or f"{where}-{i}", call["name"], call.get("arguments", {})))
    usage = raw.get("usage") or {}
    return ModelReply(
        content=str(raw.get("content") or ""),
        tool_calls=calls,
        usage=Usage(input_tokens=int(usage.get("input_tokens", 0)), output_tokens=int(usage.get("output_tokens", 0)),
                    model_calls=1),
        stop_reason=str(raw.get("stop_reason") or "")[:40],
        output_limit=raw.get("output_limit") if isinstance(raw.get("output_limit"), int) else None,
    )


class ReplayProvider:
    def __init__(self, path: str) -> None:
        self.path = path

    async def complete(self, request: ModelRequest) -> ModelReply:
        script = load_script(self.path)
        if request.agent == "proposer":
            return self._proposal(script, request)
        if request.agent in ("planner", "converger"):
            replies = script.get(request.agent) or {}
            raw = replies.get(request.round, replies.get(str(request.round)))
            if raw is None:
                raise ModelError(
                    f"replay script {self.path} has no {request.agent} reply for round {request.round}",
                    retryable=False,
                )
            if isinstance(raw, list):  # several turns: a correction after an invalid plan
                if request.turn >= len(raw):
                    raise ModelError(f"replay script {self.path} has no {request.agent} turn {request.turn + 1} "
                                     f"for round {request.round}", retryable=False)
                raw = raw[request.turn]
            return _reply(raw, f"{request.agent} round {request.round}")
        lanes = script.get("lanes") or {}
        rounds = lanes.get(request.agent) or {}
        key = str(request.round) if request.attempt == 1 else f"{request.round}.{request.attempt}"
        turns = {str(k): v for k, v in rounds.items()}.get(key) or []  # YAML may read 1.2 as a float
        if request.turn >= len(turns):
            raise ModelError(
                f"replay script {self.path} has no turn {request.turn + 1} for lane {request.agent!r} "
                f"round {key} (it has {len(turns)})",
                retryable=False,
            )
        return _reply(turns[request.turn], f"{request.agent} round {request.round} turn {request.turn + 1}")

    def _proposal(self, script: dict[str, Any], request: ModelRequest) -> ModelReply:
        """The proposer's reply for this turn: `proposer:` is one reply, a list (a reply per turn), or by round as
        a recording writes it (`0: ...`)."""
        raw = script.get("proposer")
        if isinstance(raw, dict) and not {"content", "tool_calls"} & set(raw):
            raw = raw.get(request.round, raw.get(str(request.round)))
        if raw is None:
            raise ModelError(f"replay script {self.path} has no proposer reply (a run with no lanes file asks for "
                             "one: docs/lanes.md)", retryable=False)
        turns = raw if isinstance(raw, list) else [raw]
        if request.turn >= len(turns):
            raise ModelError(f"replay script {self.path} has no proposer turn {request.turn + 1} (the first "
                             "proposal was refused; see the run's status for why)", retryable=False)
        return _reply(turns[request.turn], f"proposer turn {request.turn + 1}")

"""The oracle: a model that knows the commit a trial replays. For proving the trial harness, never for results.

Named `oracle:<repository>#<sha>[?extra=LANE&skip=LANE]`. As planner it gives
every lane whose paths hold a file of the commit the goal of applying it; as a
lane it writes exactly the commit's files inside the lane's allowed paths, then
finishes. `extra=LANE` makes that lane also write a file the commit did not
touch; `skip=LANE` makes it leave out its first file, and `idle=1` makes every
lane change nothing: a deliberately wrong oracle, whose score the harness must
get exactly right.
"""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs

from reposwarm import gitcmd
from reposwarm.agent.paths import PathPolicy
from reposwarm.contracts import ToolCall
from reposwarm.models import ModelError, ModelReply, ModelRequest


def _git(repo: str, *args: str) -> str:
    return gitcmd.run(["-C", repo, *args], capture_output=True, text=True, check=True).stdout


def _call(i: int, name: str, args: dict[str, object]) -> ToolCall:
    return ToolCall(id=f"oracle_{i}", name=name, arguments=args, raw_arguments=json.dumps(args))


class OracleProvider:
    def __init__(self, spec: str) -> None:
        target, _, query = spec.partition("?")
        self.repo, _, self.sha = target.rpartition("#")
        if not self.repo or not self.sha:
            raise ModelError(f"oracle model {spec!r} must be oracle:<repository>#<sha>", retryable=False)
        options = parse_qs(query)
        self.extra = set(options.get("extra", []))
        self.skip = set(options.get("skip", []))
        self.idle = bool(options.get("idle"))  # lanes change nothing: the result is the parent's code

    def _changes(self) -> list[tuple[str, str]]:
        out = _git(self.repo, "diff", "--name-status", "--no-renames", f"{self.sha}^", self.sha)
        return [(line.split("\t")[0][0], line.split("\t")[1]) for line in out.splitlines() if "\t" in line]

    async def complete(self, request: ModelRequest) -> ModelReply:
        if request.agent == "planner":
            return self._plan(request)
        if request.turn > 0 or self.idle:
            return ModelReply(tool_calls=[_call(99, "finish", {"summary": "applied the commit's changes",
                                                               "assumptions": []})])
        first = str(request.messages[0]["content"])
        allowed = re.search(r"^You may write: (.*)$", first, re.M)
        policy = PathPolicy(".", (allowed.group(1) if allowed else "").split(", "))
        mine = [(status, path) for status, path in self._changes() if policy.writable(path)]
        if request.agent in self.skip:
            mine = mine[1:]
        calls = []
        for i, (status, path) in enumerate(mine):
            if status == "D":
                calls.append(_call(i, "delete_file", {"path": path, "reason": "as the commit deletes it"}))
            else:
                content = _git(self.repo, "show", f"{self.sha}:{path}")
                calls.append(_call(i, "write_file", {"path": path, "content": content,
                                                     "reason": "as the commit has it"}))
        if request.agent in self.extra and policy.allowed_patterns and policy.allowed_patterns[0]:
            folder = re.split(r"[*?\[]", policy.allowed_patterns[0])[0].rstrip("/") or "."
            calls.append(_call(len(calls), "write_file", {"path": f"{folder}/ORACLE_EXTRA.txt", "content": "extra\n",
                                                          "reason": "a stray file, on purpose"}))
        if not calls:
            return ModelReply(tool_calls=[_call(98, "finish", {"summary": "nothing of the commit in my paths"})])
        return ModelReply(tool_calls=calls)

    def _plan(self, request: ModelRequest) -> ModelReply:
        text = str(request.messages[0]["content"])
        lanes = re.findall(r"^- (\S+): (.*?) / ", text, re.M)
        changed = [path for _, path in self._changes()]
        plan_lanes: list[dict[str, str]] = []
        for name, allowed in lanes:
            policy = PathPolicy(".", allowed.split(", "))
            if any(policy.writable(p) for p in changed) or name in self.extra:
                plan_lanes.append({"lane": name, "goal": f"Make the commit's change to the files in {allowed}."})
        plan: dict[str, object] = {"interface_contract": "As the commit has it.", "summary": "replay of a commit",
                                   "lanes": plan_lanes}
        return ModelReply(tool_calls=[_call(0, "submit_plan", plan)])

"""The oracle: a model that knows the commit it replays. For trying the swarm offline (`reposwarm try`) and for
proving the trial harness, never for results.

Named `oracle:<repository>#<sha>[?extra=LANE&skip=LANE&idle=1&plan=careful|structure]`. As
proposer (a run with no lanes file) it proposes, with `plan=structure` (the default), what
the structure alone suggests: a lane per top-level folder the commit touches and one for
its files at the root (reposwarm/intel/structure.py propose_lanes); with `plan=careful`,
what a careful engineer would for that commit (reposwarm/models/careful.py): vertical
lanes, the docs apart, a file two lanes both change in `overlaps`, `depends_on` from the
commit's own imports. Each lane's goal is to apply the commit's change in its files. As planner it
gives every lane whose paths hold a file of the commit the goal of applying it;
as a lane it writes exactly the commit's files inside the lane's allowed paths
(from the commit, read in the worker: the lanes never see it), then finishes.
A file that is not UTF-8 text (an image, say) is left out: a lane's write_file
takes text. `extra=LANE` makes that lane also write a file the commit did not
touch; `skip=LANE` makes it leave out its first file, and `idle=1` makes every
lane change nothing: a deliberately wrong oracle, whose score the harness must
get exactly right.

`checked` is what a command runs on the name before any run starts: the
repository is one, the commit is in it and has a parent, and the options are
those above.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from urllib.parse import parse_qs

from reposwarm.contracts import ToolCall
from reposwarm.contracts.model import ModelReply, ModelRequest
from reposwarm.models import ModelError
from reposwarm.slices.policy import PathPolicy
from reposwarm.vcs import gitcmd


def _git(repo: str, *args: str) -> str:
    return gitcmd.run(["-C", repo, *args], capture_output=True, text=True, check=True).stdout


OPTIONS = ("extra", "skip", "idle", "plan")
PLANS = ("structure", "careful")


def checked(spec: str, relative_to: Path | None = None) -> str:
    """The oracle's name (what follows `oracle:`) with the repository as an absolute path and the commit as its
    full sha, or a ModelError saying in one line what is wrong with it."""
    target, sep, query = spec.partition("?")
    repo_text, _, rev = target.rpartition("#")
    if not repo_text or not rev:
        raise ModelError("must be oracle:<repository>#<sha> (a git repository and one of its commits)",
                         retryable=False)
    unknown = sorted(set(parse_qs(query, keep_blank_values=True)) - set(OPTIONS))
    if unknown:
        raise ModelError(f"unknown option {unknown[0]!r} (known: {', '.join(OPTIONS)})", retryable=False)
    plans = parse_qs(query).get("plan", [])
    if any(plan not in PLANS for plan in plans) or len(plans) > 1:
        raise ModelError(f"plan={','.join(plans)!r}: give one of {', '.join(PLANS)}", retryable=False)
    repo = Path(repo_text).expanduser()
    if not repo.is_absolute() and relative_to is not None:
        repo = relative_to / repo
    repo = repo.resolve()
    if not repo.is_dir():
        raise ModelError(f"no such repository: {repo_text}", retryable=False)
    done = gitcmd.run(["-C", str(repo), "rev-parse", "--git-dir"], capture_output=True, text=True)
    if done.returncode != 0:
        raise ModelError(f"not a git repository: {repo_text}", retryable=False)
    try:
        sha = _git(str(repo), "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}").strip()
    except subprocess.CalledProcessError:
        raise ModelError(f"{rev!r} is not a commit in {repo}", retryable=False) from None
    parents = _git(str(repo), "rev-list", "--parents", "-n", "1", sha).split()[1:]
    if not parents:
        raise ModelError(f"commit {sha[:12]} has no parent: the oracle replays a commit's change from its parent",
                         retryable=False)
    return f"{repo}#{sha}{sep}{query}"


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
        self.plan = (options.get("plan") or ["structure"])[0]  # how it answers the proposer

    def _changes(self) -> list[tuple[str, str]]:
        # -z: paths as they are (no quoting of unusual names), a status and its path each ended by a NUL
        fields = _git(self.repo, "diff", "-z", "--name-status", "--no-renames", f"{self.sha}^", self.sha).split("\0")
        return [(fields[i][0], fields[i + 1]) for i in range(0, len(fields) - 1, 2) if fields[i]]

    async def complete(self, request: ModelRequest) -> ModelReply:
        if request.agent == "planner":
            return self._plan(request)
        if request.agent == "proposer":
            return self._propose(request)
        # past its first turn, or in a later assignment of the same lane (a repair: its conversation holds the
        # writes already made), the commit's files are in place: writing them again changes nothing and only
        # spends the lane's budget
        wrote = any(m.get("role") == "assistant" and m.get("tool_calls") for m in request.messages)
        if request.turn > 0 or self.idle or wrote:
            return ModelReply(tool_calls=[_call(99, "finish", {"summary": "applied the commit's changes",
                                                               "assumptions": []})])
        # the lane's own first message (after the run's shared context): its slice
        first = next((str(m.get("content")) for m in request.messages if m.get("role") == "user"), "")
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
                blob = gitcmd.run(["-C", self.repo, "show", f"{self.sha}:{path}"], capture_output=True,
                                  check=True).stdout
                try:
                    content = blob.decode("utf-8")
                except UnicodeDecodeError:
                    continue  # not text: write_file cannot make it (the try says the result differs there)
                calls.append(_call(i, "write_file", {"path": path, "content": content,
                                                     "reason": "as the commit has it"}))
        if request.agent in self.extra and policy.allowed_patterns and policy.allowed_patterns[0]:
            folder = re.split(r"[*?\[]", policy.allowed_patterns[0])[0].rstrip("/") or "."
            calls.append(_call(len(calls), "write_file", {"path": f"{folder}/ORACLE_EXTRA.txt", "content": "extra\n",
                                                          "reason": "a stray file, on purpose"}))
        if not calls:
            return ModelReply(tool_calls=[_call(98, "finish", {"summary": "nothing of the commit in my paths"})])
        # the writes and the finish in one reply: a second call would only say "done", and its prompt (the
        # conversation, every file written) can exceed the lane's token budget on a large commit, which pauses the
        # lane for a person
        calls.append(_call(len(calls), "finish", {"summary": "applied the commit's changes", "assumptions": []}))
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

    def _propose(self, request: ModelRequest) -> ModelReply:
        from reposwarm.intel.structure import propose_lanes

        most = re.search(r"^Propose at most (\d+) lanes\.$", str(request.messages[0]["content"]), re.M)
        if self.plan == "careful":
            return ModelReply(tool_calls=[_call(0, "submit_lanes", self._careful(int(most.group(1)) if most else 8))])
        planned = propose_lanes([path for _, path in self._changes()], max_lanes=max(1, int(most.group(1)) - 1)
                                if most else 4)
        lanes = []
        for lane in planned:
            others = [p for o in planned if o is not lane and o.folders for p in o.allowed_paths]
            lanes.append({"name": lane.name, "allowed_paths": lane.allowed_paths, "read_only_paths": others,
                          "goal": f"Make the commit's change to the files in {', '.join(lane.allowed_paths)}."})
        proposal: dict[str, object] = {"interface_contract": "As the commit has it.", "summary": "replay of a commit",
                                       "lanes": lanes}
        return ModelReply(tool_calls=[_call(0, "submit_lanes", proposal)])

    def _careful(self, max_lanes: int) -> dict[str, object]:
        from reposwarm.models.careful import careful_lanes

        sizes: dict[str, int] = {}
        fields = _git(self.repo, "diff", "-z", "--numstat", "--no-renames", f"{self.sha}^", self.sha).split("\0")
        for field in fields:  # "added<TAB>deleted<TAB>path" ("-" for binary files)
            added, _, rest = field.partition("\t")
            deleted, _, path = rest.partition("\t")
            if path:
                sizes[path] = sum(int(n) for n in (added, deleted) if n.isdigit()) or 1

        def read(path: str) -> str | None:
            done = gitcmd.run(["-C", self.repo, "show", f"{self.sha}:{path}"], capture_output=True)
            if done.returncode != 0:
                return None
            try:
                return bytes(done.stdout).decode("utf-8")
            except UnicodeDecodeError:
                return None

        return careful_lanes(self._changes(), read, sizes, max_lanes)

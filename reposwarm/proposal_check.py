"""The guardrails no proposal of lanes can pass (issue 34.2): what reposwarm/lanes_check.py check_proposal asks.

The lanes a planner model proposes are built into a lanes file and held to check_lanes, strictly (what cannot
be checked is refused), and to the rules a file written by a person need not follow: slices inside the
repository (no absolute path, no `..`, not `.git`) and not the whole of it, at most `max_lanes` lanes, a lane
writing a package's tests after the lanes writing the code those tests import (the layout's import graph), a
plan for exactly these lanes, budgets and goals of a sane size. It never raises: whatever it cannot read is one
more line of refusal, and a reply of 200 lanes or a megabyte of goal is refused in a few lines, at once.

Pure and deterministic (no clock, no randomness).
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import ValidationError

from reposwarm.agent import slices
from reposwarm.agent.paths import _spec, is_git_name
from reposwarm.contracts.config import HelperRole, LanesFile, SwarmConfig, ValidationConfig
from reposwarm.contracts.proposal import LaneProposal, RepoLayout
from reposwarm.lanes_check import (
    LANE_NAME_CHARS,
    _is_name,
    _problem,
    _too_many,
    _Tree,
    check_lanes,
    dependency_order,
    lane_graph_problems,
    shown,
)

MAX_LANE_TOKENS = 5_000_000  # a proposed lane's token_budget: more is no lane's, it is a runaway
MAX_GOAL_CHARS = 20_000  # a proposed lane's goal, and the plan's interface contract (x4)
MAX_LINES = 40  # lines of refusal: past these, how many more


def _outside(name: str, pattern: object, *, whole: bool = True) -> str | None:
    """Why a proposed writable pattern is not a slice of the repository (None when it is one). `whole=False`: a
    lane's pattern, whose slice is judged whole by _guard_slices (`*` with `!*/` is the files at the root: only
    the patterns together say whether a lane may write everything; a negation never widens)."""
    if not isinstance(pattern, str) or not pattern.strip():
        return f"lane {name!r}: an empty allowed path"
    p = pattern.strip()
    if p.startswith("/") or (len(p) > 1 and p[1] == ":") or p.startswith("~"):
        return f"lane {name!r}: {shown(p)} is an absolute path; slices are relative to the repository root"
    if ".." in p.split("/"):
        return f"lane {name!r}: {shown(p)} leads outside the repository ('..')"
    if whole and p.lstrip("!") in ("**", "**/", "**/*", "*", "*/", ".", "./", "/"):
        return f"lane {name!r}: {shown(p)} would let it write the whole repository"
    if any(is_git_name(part) for part in p.lstrip("!").split("/")):
        return f"lane {name!r}: {shown(p)} reaches .git"
    return None


def _guard_slices(lanes: Mapping[str, HelperRole], lines: list[str]) -> None:
    for name, role in lanes.items():
        if _too_many(role):
            continue  # (check_lanes says so)
        outside = [why for why in (_outside(name, p, whole=False) for p in role.allowed_paths) if why is not None]
        lines += outside
        if outside or any(_problem(p) is not None for p in role.allowed_paths):
            continue  # (check_lanes says what of it cannot be read)
        try:
            if slices.everything(role.allowed_paths):
                alone = next((p for p in role.allowed_paths if not p.startswith("!") and slices.everything([p])), None)
                lines.append(f"lane {name!r}: {shown(alone)} would let it write the whole repository" if alone else
                             f"lane {name!r}: its allowed paths together match every path in the repository")
                continue
        except slices.Undecided:
            continue  # (check_lanes says it, strictly)
        spec = _spec(role.allowed_paths)
        # (inside .git: a slice of the files at the root matches the name `.git` itself, which the path policy
        # refuses to every lane in every spelling anyway)
        if spec.match_file(".git/config") or spec.match_file(".git/hooks/pre-commit"):
            lines.append(f"lane {name!r}: its allowed paths reach .git")


def _budget_lines(proposal: LaneProposal, lines: list[str]) -> None:
    for name, role in proposal.lanes.items():
        if role.token_budget <= 0:
            lines.append(f"lane {name!r}: token_budget {role.token_budget} is not positive")
        elif role.token_budget > MAX_LANE_TOKENS:
            lines.append(f"lane {name!r}: token_budget {role.token_budget} is over the cap of {MAX_LANE_TOKENS}")
    plan = proposal.plan
    if plan is None:
        lines.append("the proposal has no plan: a goal for each lane")
        return
    if len(plan.interface_contract) > 4 * MAX_GOAL_CHARS:
        lines.append(f"the plan's interface contract is {len(plan.interface_contract)} characters, at most "
                     f"{4 * MAX_GOAL_CHARS}")
    planned: dict[str, int] = {}
    for lane in plan.lanes:
        planned[lane.lane] = planned.get(lane.lane, 0) + 1
        if len(lane.goal) > MAX_GOAL_CHARS:
            lines.append(f"lane {shown(lane.lane)}: its goal is {len(lane.goal)} characters, at most {MAX_GOAL_CHARS}")
    for name in proposal.lanes:
        if name not in planned:
            lines.append(f"lane {name!r}: the plan gives it no goal")
    for name, count in planned.items():
        if name not in proposal.lanes:
            lines.append(f"the plan names lane {shown(name)}, which the proposal does not define")
        elif count > 1:
            lines.append(f"the plan names lane {name!r} {count} times")
    if not any(line.startswith("the plan names") for line in lines):
        why = slices.plan_problem(plan, dict(proposal.lanes))
        if why is not None:
            lines.append(f"the plan: {why}")


def _owner(path: str, packages: Mapping[str, Any]) -> str | None:
    """The deepest package a file lies in."""
    folder = posixpath.dirname(path)
    while True:
        if folder in packages:
            return folder
        if not folder:
            return None
        folder = posixpath.dirname(folder)


def _test_lines(proposal: LaneProposal, tree: _Tree, layout: RepoLayout, lines: list[str]) -> None:
    """A lane writing a package's tests depends (directly or not) on each lane writing the code those tests
    test: the package's own and that of the packages it imports (the layout's import graph)."""
    packages = {p.path.strip("/"): p for p in layout.packages}
    tested: dict[str, str] = {}  # a test folder or file -> the package whose tests it holds
    for path, info in packages.items():
        for entry in info.tests:
            entry = entry.strip("/")
            root_relative = not path or entry == path or entry.startswith(path + "/")
            tested.setdefault(entry if root_relative else posixpath.join(path, entry), path)
    folders: dict[str, str | None] = {}

    def test_of(f: str) -> str | None:
        """The package a file is a test of, if it is a test file of one or lies in a test folder of one."""
        if f in tested:
            return tested[f]
        folder = posixpath.dirname(f)
        if folder not in folders:
            here, found = folder, None
            while here:
                if here in tested:
                    found = tested[here]
                    break
                here = posixpath.dirname(here)
            folders[folder] = found
        return folders[folder]

    lanes = proposal.lanes
    code: dict[str, dict[str, str]] = {}  # package -> lane -> the first file of its code the lane writes
    tests: dict[str, dict[str, str]] = {}  # lane -> package -> the first of its tests the lane writes
    for name, role in lanes.items():
        for f in tree.writable(role.allowed_paths, role.read_only_paths):
            if (pkg := test_of(f)) is not None:
                tests.setdefault(name, {}).setdefault(pkg, f)
            elif (pkg := _owner(f, packages)) is not None:
                code.setdefault(pkg, {}).setdefault(name, f)
    reach: dict[str, set[str]] = {}
    for name in dependency_order(lanes):
        reach[name] = set()
        for dep in lanes[name].depends_on:
            reach[name] |= {dep} | reach.get(dep, set())
    for name, written in tests.items():
        said: set[str] = set()
        for pkg, f in sorted(written.items()):
            for target in [pkg, *packages[pkg].imports]:
                for other, example in sorted(code.get(target.strip("/"), {}).items()):
                    if other == name or other in reach.get(name, set()) or other in said:
                        continue
                    said.add(other)
                    lines.append(f"lane {name!r} writes {f} (a test of {pkg or 'the root package'}) but does not "
                                 f"depend on {other!r}, which writes the code it tests ({example}): add {other!r} "
                                 "to its depends_on")


def _capped(lines: list[str]) -> list[str]:
    unique = list(dict.fromkeys(lines))
    if len(unique) <= MAX_LINES:
        return unique
    return unique[:MAX_LINES - 1] + [f"... and {len(unique) - MAX_LINES + 1} more problems"]


def check_proposal(proposal: LaneProposal, files: Collection[str], layout: RepoLayout | None, *,
                   max_lanes: int) -> list[str]:
    """Every reason the proposal may not run, one line each naming the lane and the path (empty: it may). The
    lanes are checked as a lanes file (check_lanes, strictly), and by the guardrails a model's reply must pass."""
    lines: list[str] = []
    try:
        lanes = proposal.lanes
        if not lanes:
            return ["the proposal has no lanes"]
        if len(lanes) > max_lanes:
            lines.append(f"{len(lanes)} lanes proposed, at most {max_lanes} (--max-lanes)")
            lines += lane_graph_problems(lanes)
            return _capped(lines)
        if bad := [name for name in lanes if not _is_name(name)]:
            return _capped([f"lane {shown(name)} is not a lane name ({LANE_NAME_CHARS})" for name in bad])
        try:
            profiles = {"default": proposal.profile} if proposal.profile is not None else {}
            config = LanesFile(swarm=SwarmConfig(lanes=dict(lanes), overlaps=list(proposal.overlaps)),
                               validation=ValidationConfig(profiles=profiles))
        except ValidationError as err:
            return _capped([f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors(include_url=False)])
        _guard_slices(lanes, lines)
        for pattern in proposal.overlaps:
            if isinstance(pattern, str) and (why := _outside("overlaps", pattern)) is not None:
                lines.append(why.replace("lane 'overlaps'", "swarm.overlaps"))
        tree = _Tree(files)  # (the writable files of each lane found once, for both checks)
        findings = check_lanes(config, tree, max_lanes=max_lanes, which="proposal", tools_on_path=False,
                               strict=True)
        lines += findings.errors
        _budget_lines(proposal, lines)
        if layout is not None and not findings.errors:
            _test_lines(proposal, tree, layout, lines)
    except Exception as err:  # noqa: BLE001 - a reply that breaks a check is refused, never a crash
        lines.append(f"the proposal could not be checked ({type(err).__name__}: {shown(str(err), 120)})")
    return _capped(lines)

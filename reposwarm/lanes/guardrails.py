"""The guardrails a planner model's proposal of lanes must pass: check_proposal (issues 34.2 and 45).

The lanes a planner model proposes are built into a lanes file and held to check_lanes (reposwarm/lanes/checking.py),
strictly (what cannot be checked is refused), and to the rules a file written by a person need not follow:
slices inside the repository (no absolute path, no `..`, not `.git`) and not the whole of it, at most
`max_lanes` lanes, a plan for exactly these lanes, budgets and goals of a sane size, and a lane that writes only
tests after the lanes that write the code those tests import.

What "the code those tests import" is comes from the base commit's import graph (reposwarm/checks/selection/resolve.py):
the files a test file's own import lines resolve to, never every file of its package; documentation, changelogs,
dotfiles and data no test imports are never code under test. A vertical lane (code and its own tests) needs no
depends_on for its tests. No rule asks for a cycle: where the dependency a rule wants would close one, or where
the guardrails cannot decide (a vertical lane's tests importing another lane's code), it is a warning for the
person confirming, not a refusal. It never raises: whatever it cannot read is one more line of refusal, and a
reply of 200 lanes or a megabyte of goal is refused in a few lines, at once.

Pure and deterministic (no clock, no randomness); the activity that calls it reads the graph.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from pydantic import ValidationError

from reposwarm.checks.selection.imports import is_code
from reposwarm.checks.testpaths import is_config, is_test_path
from reposwarm.contracts.config import HelperRole, LanesFile, SwarmConfig, ValidationConfig
from reposwarm.contracts.proposal import LaneProposal
from reposwarm.lanes.checking import (
    LANE_NAME_CHARS,
    LaneFindings,
    TrackedFiles,
    check_lanes,
    dependency_order,
    is_lane_name,
    lane_graph_problems,
    pattern_problem,
    shown,
    too_many_patterns,
)
from reposwarm.slices import narrowing as slices
from reposwarm.slices.policy import is_git_name, slice_spec

if TYPE_CHECKING:
    from reposwarm.checks.selection.resolve import Graph

MAX_LANE_TOKENS = 5_000_000  # a proposed lane's token_budget: more is no lane's, it is a runaway
MAX_GOAL_CHARS = 20_000  # a proposed lane's goal, and the plan's interface contract (x4)
MAX_LINES = 40  # lines of refusal (and of warnings): past these, how many more
MAX_TESTS_READ = 5_000  # test files of one lane whose imports are read (a lane of every test of a monorepo)


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
        if too_many_patterns(role):
            continue  # (check_lanes says so)
        outside = [why for why in (_outside(name, p, whole=False) for p in role.allowed_paths) if why is not None]
        lines += outside
        if outside or any(pattern_problem(p) is not None for p in role.allowed_paths):
            continue  # (check_lanes says what of it cannot be read)
        try:
            if slices.everything(role.allowed_paths):
                alone = next((p for p in role.allowed_paths if not p.startswith("!") and slices.everything([p])), None)
                lines.append(f"lane {name!r}: {shown(alone)} would let it write the whole repository" if alone else
                             f"lane {name!r}: its allowed paths together match every path in the repository")
                continue
        except slices.Undecided:
            continue  # (check_lanes says it, strictly)
        spec = slice_spec(role.allowed_paths)
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


def _reach(lanes: Mapping[str, HelperRole]) -> dict[str, set[str]]:
    """Per lane, every lane it runs after (its depends_on, and theirs)."""
    reach: dict[str, set[str]] = {}
    for name in dependency_order(lanes):
        reach[name] = set()
        for dep in lanes[name].depends_on:
            reach[name] |= {dep} | reach.get(dep, set())
    return reach


class _Imports:
    """What a file imports directly, as the revision's import graph resolves it (reposwarm/checks/selection/resolve.py): its
    own import lines, and the members of the groups they name (a Go package, a crate, an npm package, a folder);
    not what those files import in turn."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._members: dict[int, list[int]] = {}

    def _group(self, node: int) -> list[int]:
        """The files a group reads, through the groups it reads (once per group)."""
        if node not in self._members:
            self._members[node] = []  # (a group reading itself, through others, ends here)
            files, seen, todo = set(), {node}, [node]
            while todo:
                for target in self.graph.reads(todo.pop()):
                    if target < self.graph.files:
                        files.add(target)
                    elif target not in seen:
                        seen.add(target)
                        todo.append(target)
            self._members[node] = sorted(files)
        return self._members[node]

    def of(self, path: str) -> list[str]:
        node = self.graph.index.get(path)
        if node is None or node >= self.graph.files:
            return []
        found: set[int] = set()
        for target in self.graph.reads(node):
            found.update([target] if target < self.graph.files else self._group(target))
        found.discard(node)
        return [self.graph.names[t] for t in sorted(found)]


def _is_test(path: str) -> bool:
    """A test file, a file in a test folder, or code that configures the tests (conftest.py, jest.config.js):
    the test side of a split, never code under test."""
    return is_test_path(path) or (is_config(path) and is_code(path))


def _test_lines(lanes: Mapping[str, HelperRole], tree: TrackedFiles, graph: Graph, lines: list[str],
                warnings: list[str]) -> None:
    """A lane that writes only tests runs after every lane that writes code those tests import (the import
    graph: what a test file imports directly); refused when it does not and could. Not decided, so said as
    warnings: such a dependency that would close a cycle (the code's lane runs after the tests' already), and a
    vertical lane (code and its own tests) whose tests import another lane's code it does not run after."""
    written = {name: tree.writable(role.allowed_paths, role.read_only_paths) for name, role in lanes.items()}
    writers: dict[str, list[str]] = {}
    for name, files in written.items():
        for f in files:
            writers.setdefault(f, []).append(name)
    reach = _reach(lanes)
    imports = _Imports(graph)
    for name, files in written.items():
        tests = [f for f in files if _is_test(f)]
        if not tests:
            continue
        only_tests = not any(is_code(f) for f in files if not _is_test(f))
        mine = set(files)
        said: set[str] = set()
        for test in tests[:MAX_TESTS_READ]:
            for code in imports.of(test):
                if _is_test(code) or code in mine:
                    continue  # (a test helper is no code under test; what the lane writes itself is its own)
                for other in writers.get(code, ()):
                    if other in said or other in reach.get(name, set()):
                        continue
                    said.add(other)
                    if not only_tests:
                        warnings.append(f"lane {name!r}: its tests import code lane {other!r} writes ({test} imports "
                                        f"{code}) and it does not run after {other!r}: its own checks see that "
                                        "code as the base has it, until the merge")
                    elif name in reach.get(other, set()):
                        warnings.append(f"lane {name!r} writes only tests, and {other!r}, which writes the code "
                                        f"they import ({test} imports {code}), runs after it (depends_on): the "
                                        "tests are written before that code")
                    else:
                        lines.append(f"lane {name!r} writes only tests and does not depend on {other!r}, which "
                                     f"writes the code they import ({test} imports {code}): add {other!r} to its "
                                     "depends_on")


def _capped_lines(lines: list[str], what: str) -> list[str]:
    unique = list(dict.fromkeys(lines))
    if len(unique) <= MAX_LINES:
        return unique
    return unique[:MAX_LINES - 1] + [f"... and {len(unique) - MAX_LINES + 1} more {what}"]


def _capped(findings: LaneFindings) -> LaneFindings:
    """Each list without repeats, and at most MAX_LINES long (a reply of 200 lanes is said in a few lines)."""
    return LaneFindings(errors=_capped_lines(findings.errors, "problems"),
                        warnings=_capped_lines(findings.warnings, "warnings"),
                        notes=_capped_lines(findings.notes, "notes"))


def check_proposal(proposal: LaneProposal, files: Collection[str], graph: Graph | None, *,
                   max_lanes: int) -> LaneFindings:
    """Every reason the proposal may not run (errors: one line each naming the lane and the path; none: it may),
    and what the person confirming it should know (warnings). The lanes are checked as a lanes file (check_lanes,
    strictly), and by the guardrails a model's reply must pass; `graph`: the base commit's import graph (None:
    the test lanes' depends_on are not checked)."""
    findings = LaneFindings()
    lines, warnings = findings.errors, findings.warnings
    try:
        lanes = proposal.lanes
        if not lanes:
            lines.append("the proposal has no lanes")
            return findings
        if len(lanes) > max_lanes:
            lines.append(f"{len(lanes)} lanes proposed, at most {max_lanes} (--max-lanes)")
            lines += lane_graph_problems(lanes)
            return _capped(findings)
        if bad := [name for name in lanes if not is_lane_name(name)]:
            lines += [f"lane {shown(name)} is not a lane name ({LANE_NAME_CHARS})" for name in bad]
            return _capped(findings)
        try:
            profiles = {"default": proposal.profile} if proposal.profile is not None else {}
            config = LanesFile(swarm=SwarmConfig(lanes=dict(lanes), overlaps=list(proposal.overlaps)),
                               validation=ValidationConfig(profiles=profiles))
        except ValidationError as err:
            lines += [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors(include_url=False)]
            return _capped(findings)
        _guard_slices(lanes, lines)
        for pattern in proposal.overlaps:
            if isinstance(pattern, str) and (why := _outside("overlaps", pattern)) is not None:
                lines.append(why.replace("lane 'overlaps'", "swarm.overlaps"))
        tree = TrackedFiles(files)  # (the writable files of each lane found once, for every check)
        found = check_lanes(config, tree, max_lanes=max_lanes, which="proposal", tools_on_path=False, strict=True)
        lines += found.errors
        warnings += found.warnings
        findings.notes += found.notes
        _budget_lines(proposal, lines)
        if graph is not None and not found.errors:
            _test_lines(lanes, tree, graph, lines, warnings)
    except Exception as err:  # noqa: BLE001 - a reply that breaks a check is refused, never a crash
        lines.append(f"the proposal could not be checked ({type(err).__name__}: {shown(str(err), 120)})")
    return _capped(findings)

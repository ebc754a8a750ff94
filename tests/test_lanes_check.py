"""What the loader says of a lanes file beyond its keys, and the guardrails of a proposal (issue 34.2 and 34.5).

On real git repositories in temporary folders (the tracked files come from git), through the loader and the
real command line (which stops before it connects to Temporal: tests/test_cli_errors.py's helpers), and
check_proposal on hostile proposals, each refused in lines that name the lane and the path. The proposals shaped
like real projects' (issue 45) are in tests/test_proposal_guardrails.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from reposwarm.checks.selection import resolve
from reposwarm.cli.common import tracked_files
from reposwarm.contracts import HelperRole, LanePlan, Plan
from reposwarm.contracts.errors import ConfigError
from reposwarm.contracts.proposal import LaneProposal
from reposwarm.lanes.checking import check_lanes
from reposwarm.lanes.guardrails import check_proposal
from reposwarm.lanes.loading import read_lanes_file
from reposwarm.slices.narrowing import Undecided, shared
from reposwarm.slices.policy import PathPolicy
from tests.helpers import make_repo
from tests.test_cli_errors import error_line, run_starter
from tests.test_slices import SETTINGS, paths, patterns, slice_lists

FILES = {
    "README.md": "hello\n",
    "api/app.py": "from shared import util\n",
    "api/tests/test_app.py": "import api.app\n",
    "api/admin.py": "X = 1\n",
    "web/index.js": "console.log(1)\n",
    "shared/util.py": "Y = 2\n",
    "scripts/check.sh": "#!/bin/sh\ntrue\n",
    "services/a/main.go": "package a\n",
    "services/ab/main.go": "package ab\n",
    "services/admin/main.go": "package admin\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


def lanes_file(tmp_path: Path, lanes: dict[str, Any], **extra: Any) -> Path:
    swarm = {"lanes": lanes, **{k: v for k, v in extra.items() if k != "validation"}}
    data: dict[str, Any] = {"swarm": swarm}
    if "validation" in extra:
        data["validation"] = extra["validation"]
    path = tmp_path / "lanes.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def refused(path: Path, repo: Path) -> list[str]:
    """The loader's one error, as its problem lines (one line when there is one problem)."""
    with pytest.raises(ConfigError) as caught:
        read_lanes_file(path, tracked_files(repo), root=repo)
    text = str(caught.value)
    assert text.startswith(f"{path}: ")
    first, *rest = text.splitlines()
    return [line.removeprefix("  - ") for line in rest] if rest else [first.removeprefix(f"{path}: ")]


# --- two lanes writing one path ---


def test_two_lanes_that_may_write_one_path_are_refused_with_the_path_and_the_tracked_files(tmp_path: Path, repo: Path) -> None:
    path = lanes_file(tmp_path, {"api": {"allowed_paths": ["api/"]}, "web": {"allowed_paths": ["web/", "a*/"]}})
    [line] = refused(path, repo)
    assert line.startswith("swarm.lanes: lanes 'api' and 'web' may both write 'api/")
    assert "tracked files both may write: api/admin.py, api/app.py, api/tests/test_app.py" in line
    assert "swarm.overlaps" in line  # (what to do about it)


def test_overlap_is_decided_exactly_not_by_the_text_before_the_glob(tmp_path: Path, repo: Path) -> None:
    # 'services/a/' and 'services/ab/' share their text but no path; 'services/a*/' and 'services/admin/' do not
    # share it, but 'services/a*/' reaches services/admin/.
    apart = lanes_file(tmp_path, {"a": {"allowed_paths": ["services/a/"]}, "ab": {"allowed_paths": ["services/ab/"]}})
    assert read_lanes_file(apart, tracked_files(repo))[1].errors == []
    path = lanes_file(tmp_path, {"wide": {"allowed_paths": ["services/a*/"]},
                                 "admin": {"allowed_paths": ["services/admin/"]}})
    [line] = refused(path, repo)
    assert "lanes 'wide' and 'admin' may both write 'services/admin/" in line
    assert "services/admin/main.go" in line


def test_a_read_only_path_takes_the_shared_part_out_of_one_lane(tmp_path: Path, repo: Path) -> None:
    path = lanes_file(tmp_path, {"api": {"allowed_paths": ["api/"], "read_only_paths": ["api/tests/"]},
                                 "tests": {"allowed_paths": ["api/tests/"], "read_only_paths": ["api/"]}})
    # ("tests" lists api/ read-only beside its own api/tests/: read-only wins there, so: refused, said so)
    lines = refused(path, repo)
    assert lines == [
        "swarm.lanes.tests: 'api/tests/' is both writable and read-only: read_only_paths 'api/' covers all of it "
        "('api/tests/x', say), and read-only wins, so the lane may write none of it; take it out of one of the "
        "two lists"]
    fixed = lanes_file(tmp_path, {"api": {"allowed_paths": ["api/"], "read_only_paths": ["api/tests/"]},
                                  "tests": {"allowed_paths": ["api/tests/"], "read_only_paths": ["api/app.py"]}})
    config, findings = read_lanes_file(fixed, tracked_files(repo))
    assert findings.errors == [] and set(config.swarm.lanes) == {"api", "tests"}


def test_declared_overlaps_are_a_note_and_only_inside_them(tmp_path: Path, repo: Path) -> None:
    lanes = {"api": {"allowed_paths": ["api/", "shared/"]}, "web": {"allowed_paths": ["web/", "shared/"]}}
    declared = lanes_file(tmp_path, lanes, overlaps=["shared/"])
    config, findings = read_lanes_file(declared, tracked_files(repo))
    assert config.swarm.overlaps == ["shared/"]
    assert findings.errors == []
    assert findings.notes == ["lanes 'api' and 'web' may both write inside swarm.overlaps (shared/util.py): their "
                              "merges there go to the converger"]
    narrower = lanes_file(tmp_path, lanes, overlaps=["shared/*.md"])
    [line] = refused(narrower, repo)
    assert "lanes 'api' and 'web' may both write 'shared/" in line and "shared/util.py" in line


# --- everything at once ---


def test_every_problem_of_a_file_is_one_error(tmp_path: Path, repo: Path) -> None:
    path = lanes_file(tmp_path, {
        "api": {"allowed_paths": ["api/"], "read_only_paths": ["api/"], "depends_on": ["ghost"]},
        "web": {"allowed_paths": ["web/", "api/app.py"], "token_budgt": 5},
        "cli": {"allowed_paths": ["cli/"], "depends_on": ["cli"]},
    })
    lines = refused(path, repo)
    assert lines == [
        "swarm.lanes.web.token_budgt: unknown key 'token_budgt' (did you mean 'token_budget'?)",
        "swarm.lanes.api.depends_on: unknown lane 'ghost'",
        "swarm.lanes.cli.depends_on: a lane cannot depend on itself",
        "swarm.lanes.api: 'api/' is both writable and read-only: read_only_paths 'api/' covers all of it ('api/x', "
        "say), and read-only wins, so the lane may write none of it; take it out of one of the two lists",
    ]


# --- warnings, from the commit's files and this host ---


def test_a_slice_matching_no_tracked_file_is_a_warning(tmp_path: Path, repo: Path) -> None:
    path = lanes_file(tmp_path, {"api": {"allowed_paths": ["apj/", "api/"], "read_only_paths": ["docs/"]}})
    _, findings = read_lanes_file(path, tracked_files(repo), at=" at HEAD")
    assert findings.errors == []
    assert findings.warnings == ["swarm.lanes.api.allowed_paths: 'apj/' matches no tracked file at HEAD",
                                 "swarm.lanes.api.read_only_paths: 'docs/' matches no tracked file at HEAD"]


def test_tracked_files_are_the_commit_s_not_the_working_tree_s(tmp_path: Path, repo: Path) -> None:
    (repo / "docs").mkdir()
    (repo / "docs" / "new.md").write_text("untracked\n")
    path = lanes_file(tmp_path, {"docs": {"allowed_paths": ["docs/"]}})
    assert read_lanes_file(path, tracked_files(repo))[1].warnings == [
        "swarm.lanes.docs.allowed_paths: 'docs/' matches no tracked file"]


def test_a_check_program_not_installed_is_a_warning(tmp_path: Path, repo: Path) -> None:
    commands = [["python3", "-m", "unittest"], ["npx", "jest"], ["env", "CI=1", "no-such-tool-xyz", "run"],
                ["scripts/check.sh"], ["scripts/missing.sh"], ["pytst-nowhere"]]
    path = lanes_file(tmp_path, {"api": {"allowed_paths": ["api/"]}},
                      validation={"profiles": {"default": {"commands": commands}}})
    _, findings = read_lanes_file(path, tracked_files(repo), root=repo, tools_on_path=True)
    assert findings.warnings == [
        "validation.profiles.default.commands.2: 'no-such-tool-xyz' is not on PATH here (the check fails on a worker "
        "without it)",
        "validation.profiles.default.commands.4: 'scripts/missing.sh' is not a file in the repository (the check "
        "fails on a worker without it)",
        "validation.profiles.default.commands.5: 'pytst-nowhere' is not on PATH here (the check fails on a worker "
        "without it)",
    ]


# --- through the real command line ---


def test_run_says_the_warnings_and_goes_on(tmp_path: Path, repo: Path) -> None:
    path = lanes_file(tmp_path, {"api": {"allowed_paths": ["api/"]}, "docs": {"allowed_paths": ["docs/"]}},
                      validation={"profiles": {"default": {"commands": [["no-such-tool-xyz"]]}}})
    for extra in ([], ["--dry-run"]):
        proc = run_starter("run", "--repo", str(repo), "--task", "x", "--lanes", str(path), "--model",
                           "openai:gpt-4.1", *extra)
        warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
        assert warnings == [
            f"warning: {path}: swarm.lanes.docs.allowed_paths: 'docs/' matches no tracked file at HEAD",
            f"warning: {path}: validation.profiles.default.commands.0: 'no-such-tool-xyz' is not on PATH here (the "
            "check fails on a worker without it)"], proc.stderr
        assert proc.stderr.splitlines()[-1].startswith("error: cannot reach Temporal"), proc.stderr


def test_run_lists_every_problem_in_one_error(tmp_path: Path, repo: Path) -> None:
    path = lanes_file(tmp_path, {"api": {"allowed_paths": ["api/"], "depends_on": ["ghost"]},
                                 "web": {"allowed_paths": ["a*/"], "max_turns": 0}})
    proc = run_starter("run", "--repo", str(repo), "--task", "x", "--lanes", str(path))
    assert error_line(proc, one_line=False) == f"error: {path}: 3 problems:"
    lines = proc.stderr.splitlines()[1:]
    assert lines[:2] == ["  - swarm.lanes.web.max_turns: Input should be greater than 0",
                         "  - swarm.lanes.api.depends_on: unknown lane 'ghost'"]
    assert lines[2].startswith("  - swarm.lanes: lanes 'api' and 'web' may both write 'api/")
    assert len(lines) == 3


# --- the intersection search, against PathPolicy itself ---


@SETTINGS
@given(data=st.data(), first=slice_lists(), second=slice_lists(), ro=st.lists(patterns(), max_size=1))
def test_shared_holds_against_the_path_policy(data: st.DataObject, first: list[str], second: list[str],
                                              ro: list[str]) -> None:
    try:
        witness = shared((first, ro), (second, []))
    except Undecided:
        return
    a, b = PathPolicy(".", first, ro), PathPolicy(".", second, [])
    if witness is not None:
        assert a.writable(witness) and b.writable(witness), (first, ro, second, witness)
        return
    for path in data.draw(paths(first[0])) + data.draw(paths(second[0])):
        assert not (a.writable(path) and b.writable(path)), (first, ro, second, path)


# --- the guardrails of a proposal ---


def role(*allowed: str, deps: tuple[str, ...] = (), **extra: Any) -> HelperRole:
    return HelperRole(allowed_paths=list(allowed), depends_on=list(deps), **extra)


def proposal(lanes: dict[str, HelperRole], goals: dict[str, str] | None = None, **extra: Any) -> LaneProposal:
    plan = Plan(interface_contract="c", lanes=[LanePlan(lane=name, goal=(goals or {}).get(name, "do it"))
                                               for name in (goals or lanes)])
    return LaneProposal(lanes=lanes, plan=plan, **extra)


GOOD = {"shared": role("shared/"), "api": role("api/", deps=("shared",)), "web": role("web/")}


@pytest.fixture
def graph(repo: Path, reposwarm_home: Path) -> resolve.Graph:
    """The repository's import graph at HEAD, as the proposing activity reads it."""
    return resolve.load(repo, "HEAD")


def problems(lanes: dict[str, HelperRole], repo: Path, graph: resolve.Graph | None, **extra: Any) -> list[str]:
    return check_proposal(proposal(lanes, **extra), tracked_files(repo) or [], graph, max_lanes=8).errors


def test_a_sound_proposal_passes(repo: Path, graph: resolve.Graph) -> None:
    assert problems(GOOD, repo, graph) == []


def test_a_lane_of_the_files_at_the_root_is_no_lane_of_everything(repo: Path, graph: resolve.Graph) -> None:
    """`*` with `!*/` is the files at the root (as `reposwarm try` and the oracle propose it): judged as a whole
    slice, not pattern by pattern, it is a slice like any other."""
    lanes = {**GOOD, "root": role("*", "!*/")}
    assert problems(lanes, repo, graph) == []


@pytest.mark.parametrize(("lanes", "extra", "expected"), [
    ({f"l{i}": role(f"d{i}/") for i in range(200)}, {}, "200 lanes proposed, at most 8 (--max-lanes)"),
    ({"api\nrm -rf": role("api/"), "web": role("web/")}, {}, "lane 'api\\nrm -rf' is not a lane name"),
    ({**GOOD, "all": role("**")}, {}, "lane 'all': '**' would let it write the whole repository"),
    ({**GOOD, "all": role("**/*.py", "**/*.md", "**")}, {}, "lane 'all': '**' would let it write"),
    ({**GOOD, "all": role("[a-z]*/", "[!a-z]*", "[a-z]*")}, {}, "lane 'all': its allowed paths together match "
                                                               "every path"),
    ({**GOOD, "out": role("../other/")}, {}, "lane 'out': '../other/' leads outside the repository ('..')"),
    ({**GOOD, "out": role("/etc/")}, {}, "lane 'out': '/etc/' is an absolute path"),
    ({**GOOD, "git": role(".git/hooks/")}, {}, "lane 'git': '.git/hooks/' reaches .git"),
    ({**GOOD, "web2": role("web/")}, {}, "swarm.lanes: lanes 'web' and 'web2' may both write 'web/"),
    ({"a": role("api/", deps=("b",)), "b": role("web/", deps=("a",))}, {}, "depends_on cycle: a -> b -> a"),
    ({**GOOD, "big": role("docs/", token_budget=10**9)}, {}, "lane 'big': token_budget 1000000000 is over the cap"),
    ({**GOOD, "tests": role("api/tests/", deps=("api",))}, {}, "swarm.lanes: lanes 'api' and 'tests' may both "
                                                               "write 'api/tests/"),
    ({**GOOD, "many": role(*(f"m{i}/" for i in range(5000)))}, {}, "swarm.lanes.many.allowed_paths: more than 64 "
                                                                   "patterns cannot be checked"),
    ({**GOOD, "long": role("x" * 1_000_000 + "/")}, {}, "swarm.lanes.long.allowed_paths: 'xxxxxxxx"),
    ({**GOOD, "web": role("web/", deps=("nowhere",))}, {}, "swarm.lanes.web.depends_on: unknown lane 'nowhere'"),
])
def test_a_hostile_proposal_is_refused_line_by_line(repo: Path, graph: resolve.Graph, lanes: dict[str, HelperRole],
                                                 extra: dict[str, Any], expected: str) -> None:
    lines = problems(lanes, repo, graph, **extra)
    assert any(line.startswith(expected) or expected in line for line in lines), lines
    assert all("\n" not in line and len(line) < 600 for line in lines), lines
    assert len(lines) <= 40


def test_a_megabyte_goal_and_a_plan_for_other_lanes_are_refused(repo: Path, graph: resolve.Graph) -> None:
    huge = proposal(GOOD, goals={"shared": "x" * 1_000_000, "api": "g", "ghost": "g"})
    lines = check_proposal(huge, tracked_files(repo) or [], graph, max_lanes=8).errors
    assert "lane 'shared': its goal is 1000000 characters, at most 20000" in lines
    assert "lane 'web': the plan gives it no goal" in lines
    assert "the plan names lane 'ghost', which the proposal does not define" in lines
    assert check_proposal(LaneProposal(lanes=GOOD), [], None, max_lanes=8).errors == [
        "the proposal has no plan: a goal for each lane"]


def test_a_lane_writing_only_tests_depends_on_the_lanes_whose_code_they_import(repo: Path,
                                                                              graph: resolve.Graph) -> None:
    """api/tests/test_app.py imports api.app: the lane writing it runs after the lane writing api/app.py. What
    api/app.py imports in turn (shared/util.py) is not what the tests import: no line for 'shared'."""
    lanes = {"shared": role("shared/"), "api": role("api/", deps=("shared",), read_only_paths=["api/tests/"]),
             "tests": role("api/tests/"), "web": role("web/")}
    assert problems(lanes, repo, graph) == [
        "lane 'tests' writes only tests and does not depend on 'api', which writes the code they import "
        "(api/tests/test_app.py imports api/app.py): add 'api' to its depends_on"]
    assert problems({**lanes, "tests": role("api/tests/", deps=("api",))}, repo, graph) == []
    assert problems(lanes, repo, None) == []  # (no graph: the rule is not checked)


def test_a_dependency_the_rule_wants_that_would_close_a_cycle_is_a_warning(repo: Path, graph: resolve.Graph) -> None:
    """The code's lane already runs after the tests' (tests first, on purpose): the rule cannot ask for the other
    order too. Said to the person confirming, not refused."""
    lanes = {"shared": role("shared/"), "tests": role("api/tests/"),
             "api": role("api/", deps=("shared", "tests"), read_only_paths=["api/tests/"]), "web": role("web/")}
    found = check_proposal(proposal(lanes), tracked_files(repo) or [], graph, max_lanes=8)
    assert found.errors == []
    assert found.warnings == [
        "lane 'tests' writes only tests, and 'api', which writes the code they import (api/tests/test_app.py imports "
        "api/app.py), runs after it (depends_on): the tests are written before that code"]


def test_declared_overlaps_of_a_proposal(repo: Path) -> None:
    lanes = {**GOOD, "api": role("api/", "shared/", deps=("shared",))}
    assert any("may both write 'shared/" in line for line in problems(lanes, repo, None))
    assert problems(lanes, repo, None, overlaps=["shared/"]) == []
    assert problems(lanes, repo, None, overlaps=["**"]) == [
        "swarm.overlaps: '**' would let it write the whole repository"]


def test_check_lanes_on_a_proposal_is_the_loader_s_check(tmp_path: Path, repo: Path) -> None:
    """The same code: a lanes file the loader refuses, built as a proposal, is refused with the same line."""
    path = lanes_file(tmp_path, {"api": {"allowed_paths": ["api/"]}, "web": {"allowed_paths": ["a*/"]}})
    [line] = refused(path, repo)
    assert line in problems({"api": role("api/"), "web": role("a*/")}, repo, None)
    config, _ = read_lanes_file(lanes_file(tmp_path, {"api": {"allowed_paths": ["api/"]}}), None)
    assert check_lanes(config, max_lanes=0).errors == ["swarm.lanes: the lanes file has 1 lanes, at most 0"]

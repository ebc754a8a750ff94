"""The guardrails on proposals a careful planner made for real projects (issue 45): accepted, and hostile ones still
refused.

Each proposal is the planner's reply for a real commit of click, attrs, structlog and humanize, on a small
repository shaped like the project (tests/real_shapes.py), read and checked by the proposing activity's own code
(activities/proposing.py: the reply as a proposal, the base commit's files and import graph from git, the
guardrails). Each was refused before: every file of the root package counted as code under the tests (Markdown,
dotfiles, the changelog), and two vertical lanes would each have had to depend on the other.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from activities.planning import tracked_files
from activities.proposing import checked, import_graph, proposal_of
from reposwarm.agent.specs import SubmitLanesArgs
from reposwarm.contracts import LaneProposal
from tests.helpers import git, make_repo
from tests.real_shapes import HUMANIZE, SHAPES, shaped_repo


def check(repo: Path, reply: dict[str, Any], max_lanes: int = 8) -> LaneProposal:
    """The reply as the propose_lanes activity reads and checks it, on the repository's HEAD."""
    sha = git(repo, "rev-parse", "HEAD")
    graph, unread = import_graph(str(repo), sha)
    assert graph is not None, unread
    proposal = proposal_of(SubmitLanesArgs.model_validate(reply), "openai:gpt-4.1", None)
    return checked(proposal, tracked_files(str(repo), sha), graph, max_lanes, unread)


def lane_of(reply: dict[str, Any], name: str) -> dict[str, Any]:
    return next(lane for lane in reply["lanes"] if lane["name"] == name)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_careful_split_of_a_real_commit_is_accepted(tmp_path: Path, reposwarm_home: Path, shape: str) -> None:
    repo = shaped_repo(tmp_path, shape)
    proposal = check(repo, SHAPES[shape][1])
    assert proposal.problems == [], proposal.problems
    assert proposal.warnings == [], proposal.warnings
    assert list(proposal.lanes) == [lane["name"] for lane in SHAPES[shape][1]["lanes"]]


def test_two_vertical_lanes_sharing_a_declared_file_need_not_depend_on_each_other(tmp_path: Path,
                                                                                  reposwarm_home: Path) -> None:
    """click: each lane writes a feature and its own tests, both write src/click/__init__.py (declared), and
    neither depends on the other; the declared file is a predicted overlap, for the converger."""
    repo = shaped_repo(tmp_path, "click")
    proposal = check(repo, SHAPES["click"][1])
    assert proposal.problems == []
    assert proposal.predicted_overlaps == ["src/click/__init__.py: option-suggestions, command-suggestions"]
    assert all(not role.depends_on for role in proposal.lanes.values())


def test_changelogs_docs_and_dotfiles_are_never_code_under_test(tmp_path: Path, reposwarm_home: Path) -> None:
    """humanize and attrs: the tests lane does not depend on the lane of the docs, README, CHANGELOG.md,
    .gitignore and changelog.d/ (no test imports them), nor does the lane of docs depend on anything."""
    for shape, docs in (("humanize", "docs"), ("attrs", "changelog")):
        repo = shaped_repo(tmp_path, shape)
        reply = SHAPES[shape][1]
        assert docs not in lane_of(reply, "tests")["depends_on"]
        assert check(repo, reply).problems == [], shape


def test_a_lane_of_only_tests_still_runs_after_the_code_it_imports(tmp_path: Path, reposwarm_home: Path) -> None:
    """humanize's tests lane without its depends_on: tests/test_number.py imports humanize, whose
    src/humanize/__init__.py the 'number' lane writes. Refused, naming the test, the import and the fix."""
    repo = shaped_repo(tmp_path, "humanize")
    reply = copy.deepcopy(SHAPES["humanize"][1])
    lane_of(reply, "tests")["depends_on"] = []
    refused = ["lane 'tests' writes only tests and does not depend on 'number', which writes the code they import "
               "(tests/test_number.py imports src/humanize/__init__.py): add 'number' to its depends_on"]
    assert check(repo, reply).problems == refused
    # a conftest.py at the root is the tests' side too (test configuration, not code under test): its imports
    # are the tests' imports
    rooted = make_repo(tmp_path / "rooted", {**HUMANIZE, "conftest.py": "import humanize\n"})
    lane_of(reply, "tests")["allowed_paths"] = ["tests/**", "conftest.py"]
    assert check(rooted, reply).problems == [refused[0].replace("tests/test_number.py imports", "conftest.py imports")]


def test_what_the_guardrails_cannot_decide_is_a_warning(tmp_path: Path, reposwarm_home: Path) -> None:
    """structlog: the stdlib lane (vertical) no longer runs after contextvars, whose code its tests import; and the
    processors' tests lane comes first and the processors lane after it (tests first, on purpose), which the
    rule cannot turn round without a cycle. Both said as warnings; the proposal is accepted."""
    repo = shaped_repo(tmp_path, "structlog")
    reply = copy.deepcopy(SHAPES["structlog"][1])
    lane_of(reply, "stdlib")["depends_on"] = []
    lane_of(reply, "processor-tests")["depends_on"] = []
    lane_of(reply, "processors")["depends_on"] = ["contextvars", "processor-tests"]
    proposal = check(repo, reply)
    assert proposal.problems == []
    assert proposal.warnings == [
        "lane 'stdlib': its tests import code lane 'contextvars' writes (tests/test_stdlib.py imports "
        "src/structlog/contextvars.py) and it does not run after 'contextvars': its own checks see that code as the "
        "base has it, until the merge",
        "lane 'processor-tests' writes only tests, and 'processors', which writes the code they import "
        "(tests/test_processors.py imports src/structlog/processors.py), runs after it (depends_on): the tests are "
        "written before that code"]


def hostile(reply: dict[str, Any], kind: str) -> dict[str, Any]:
    """The careful click reply, made hostile one way."""
    bad = copy.deepcopy(reply)
    docs = lane_of(bad, "docs")
    if kind == "outside the repository":
        docs["allowed_paths"] = ["../click-website/**"]
    elif kind == "the whole repository":
        docs["allowed_paths"] = ["**"]
    elif kind == "an undeclared overlap":
        bad["overlaps"] = []
    elif kind == "too many lanes":
        bad["lanes"] += [{"name": f"extra{i}", "goal": "g", "allowed_paths": [f"extra{i}/"]} for i in range(8)]
    elif kind == "a cycle":
        lane_of(bad, "option-suggestions")["depends_on"] = ["command-suggestions"]
        lane_of(bad, "command-suggestions")["depends_on"] = ["option-suggestions"]
    return bad


REFUSED = {
    "outside the repository": "lane 'docs': '../click-website/**' leads outside the repository ('..')",
    "the whole repository": "lane 'docs': '**' would let it write the whole repository",
    "an undeclared overlap": "swarm.lanes: lanes 'option-suggestions' and 'command-suggestions' may both write "
                             "'src/click/__init__.py'",
    "too many lanes": "11 lanes proposed, at most 8 (--max-lanes)",
    "a cycle": "swarm.lanes: depends_on cycle: option-suggestions -> command-suggestions -> option-suggestions",
}


@pytest.mark.parametrize("kind", list(REFUSED))
def test_a_hostile_proposal_on_the_same_repository_is_still_refused(tmp_path: Path, reposwarm_home: Path,
                                                                     kind: str) -> None:
    repo = shaped_repo(tmp_path, "click")
    proposal = check(repo, hostile(SHAPES["click"][1], kind))
    assert any(line.startswith(REFUSED[kind]) for line in proposal.problems), proposal.problems
    assert proposal.predicted_overlaps == []


def test_the_projects_own_tests_pass_on_each_shaped_repository(tmp_path: Path) -> None:
    """The shapes are projects whose tests run (the end-to-end runs deliver on them)."""
    import subprocess
    import sys

    for shape in SHAPES:
        repo = shaped_repo(tmp_path, shape)
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=repo,
                              capture_output=True, text=True, timeout=120,
                              env={"PATH": "/usr/bin:/bin", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
        assert done.returncode == 0 and " passed" in done.stdout, (shape, done.stdout, done.stderr)

"""A bad lanes or plan file is reported whole: the file, then every problem, an unknown key with a did-you-mean.

Pure and fast: the loaders are called directly, and the CLI cases stop before
they connect to Temporal (see tests/test_cli_errors.py, whose helpers they use).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reposwarm.contracts.errors import ConfigError
from reposwarm.lanes.loading import load_lanes_file, load_plan_file
from tests.test_cli_errors import GOOD_LANES, error_line, make_repo, run_in_repo, run_starter


def lanes_error(tmp_path: Path, text: str) -> tuple[Path, str]:
    path = tmp_path / "lanes.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_lanes_file(path)
    return path, str(caught.value)


def plan_error(tmp_path: Path, text: str) -> tuple[Path, str]:
    lanes = tmp_path / "lanes.yaml"
    lanes.write_text(GOOD_LANES)
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_plan_file(path, load_lanes_file(lanes))
    return path, str(caught.value)


TWO_PROBLEMS = """\
swarm:
  max_paralel: 2
  lanes:
    api: {allowed_paths: ["api/"], token_budgt: 1000}
"""


def test_every_problem_is_listed(tmp_path: Path) -> None:
    path, message = lanes_error(tmp_path, TWO_PROBLEMS)
    assert message.splitlines() == [
        f"{path}: 2 problems:",
        "  - swarm.lanes.api.token_budgt: unknown key 'token_budgt' (did you mean 'token_budget'?)",
        "  - swarm.max_paralel: unknown key 'max_paralel' (did you mean 'max_parallel'?)",
    ]


def test_misspelt_key_gets_a_did_you_mean(tmp_path: Path) -> None:
    path, message = lanes_error(tmp_path, "swarm:\n  lanes:\n    api: {allowed_paths: [api/], token_budgt: 1000}\n")
    assert message == f"{path}: swarm.lanes.api.token_budgt: unknown key 'token_budgt' (did you mean 'token_budget'?)"
    assert "Field required" not in message


def test_misspelt_required_key_is_only_the_did_you_mean(tmp_path: Path) -> None:
    path, message = lanes_error(tmp_path, "swarm:\n  lanes:\n    api: {allowed_path: [api/]}\n")
    assert message == f"{path}: swarm.lanes.api.allowed_path: unknown key 'allowed_path' (did you mean 'allowed_paths'?)"
    assert "Field required" not in message


def test_misspelt_required_key_in_a_plan(tmp_path: Path) -> None:
    path, message = plan_error(tmp_path, "interface_contract: c\nlanes:\n  - {lane: db, gaol: g}\n")
    assert message == f"{path}: lanes.0.gaol: unknown key 'gaol' (did you mean 'goal'?)"


def test_unknown_key_without_a_close_match_lists_the_known_keys(tmp_path: Path) -> None:
    path, message = lanes_error(tmp_path, "swarm:\n  lanes:\n    api: {allowed_paths: [api/], zzz: 1}\n")
    assert message.startswith(f"{path}: swarm.lanes.api.zzz: unknown key 'zzz' (known keys: ")
    assert "token_budget" in message and "did you mean" not in message
    assert len(message.splitlines()) == 1


def test_missing_key_with_no_typo_is_still_reported(tmp_path: Path) -> None:
    path, message = lanes_error(tmp_path, "swarm:\n  lanes:\n    api: {token_budget: 1000, zzz: 1}\n")
    lines = message.splitlines()
    assert lines[0] == f"{path}: 2 problems:"
    assert "  - swarm.lanes.api.allowed_paths: Field required" in lines
    assert any(line.startswith("  - swarm.lanes.api.zzz: unknown key 'zzz'") for line in lines)


def test_single_problem_stays_one_line(tmp_path: Path) -> None:
    path, message = lanes_error(tmp_path, "swarm:\n  max_parallel: 0\n  lanes:\n    api: {allowed_paths: [api/]}\n")
    assert message == f"{path}: swarm.max_parallel: Input should be greater than 0"


def test_value_errors_read_without_the_pydantic_prefix(tmp_path: Path) -> None:
    path, message = lanes_error(tmp_path, GOOD_LANES.replace("profile: default", "profile: nope"))
    assert message == f"{path}: validation: profile 'nope' is not one of ['default']"


# --- through the real CLI ---


def test_cli_lists_every_problem(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text(TWO_PROBLEMS)
    proc = run_starter("run", "--repo", str(repo), "--task", "x", "--lanes", str(bad))
    assert error_line(proc, one_line=False) == f"error: {bad}: 2 problems:"
    assert proc.stderr.splitlines()[1:] == [
        "  - swarm.lanes.api.token_budgt: unknown key 'token_budgt' (did you mean 'token_budget'?)",
        "  - swarm.max_paralel: unknown key 'max_paralel' (did you mean 'max_parallel'?)",
    ]


def test_cli_single_typo_is_one_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("swarm:\n  lanes:\n    api: {allowed_path: [api/]}\n")
    line = run_in_repo(repo, "--lanes", str(bad))
    assert line == f"error: {bad}: swarm.lanes.api.allowed_path: unknown key 'allowed_path' (did you mean 'allowed_paths'?)"


# --- the lane graph and the slices, with the schema's problems (issue 34.5) ---

GRAPH_AND_SCHEMA = """\
swarm:
  max_paralel: 2
  lanes:
    api: {allowed_paths: ["api/"], depends_on: [dbb]}
    db: {allowed_paths: ["db/"], depends_on: [api]}
    web: {allowed_paths: ["web/", "api/"], token_budget: 0}
"""


def test_unknown_depends_on_is_listed_with_the_schema_s_problems(tmp_path: Path) -> None:
    path, message = lanes_error(tmp_path, GRAPH_AND_SCHEMA)
    assert message.splitlines() == [
        f"{path}: 4 problems:",
        "  - swarm.lanes.web.token_budget: Input should be greater than 0",
        "  - swarm.max_paralel: unknown key 'max_paralel' (did you mean 'max_parallel'?)",
        "  - swarm.lanes.api.depends_on: unknown lane 'dbb' (did you mean 'db'?)",
        "  - swarm.lanes: lanes 'api' and 'web' may both write 'api/x': make their allowed_paths disjoint (a "
        "read_only_paths entry or a '!' pattern takes a path out of one), or declare the shared paths in "
        "swarm.overlaps",
    ]


def test_every_graph_problem_at_once(tmp_path: Path) -> None:
    path, message = lanes_error(tmp_path, """\
swarm:
  lanes:
    a: {allowed_paths: ["a/"], depends_on: [b, ghost]}
    b: {allowed_paths: ["b/"], depends_on: [a]}
    "c d": {allowed_paths: ["c/"]}
""")
    assert message.splitlines() == [
        f"{path}: 3 problems:",
        "  - swarm.lanes.a.depends_on: unknown lane 'ghost'",
        "  - swarm.lanes: 'c d' is not a lane name (letters, digits, '_' and '-', starting with a letter or digit, "
        "at most 64 characters)",
        "  - swarm.lanes: depends_on cycle: a -> b -> a",
    ]


def test_a_plan_file_s_problems_all_at_once(tmp_path: Path) -> None:
    path, message = plan_error(tmp_path, "interface_contract: c\nlanes:\n  - {lane: api, goal: g}\n"
                                         "  - {lane: web, goal: g}\n  - {lane: cli, goal: g}\n")
    assert message.splitlines() == [
        f"{path}: 3 problems:",
        "  - lanes.1.lane: unknown lane 'web' (the lanes file defines api, db)",
        "  - lanes.2.lane: unknown lane 'cli' (the lanes file defines api, db)",
        "  - lane 'api' depends on 'db', which the plan leaves out",
    ]


def test_cli_lists_the_unknown_lane_with_the_schema_s_problems(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text(GRAPH_AND_SCHEMA)
    proc = run_starter("run", "--repo", str(repo), "--task", "x", "--lanes", str(bad))
    assert error_line(proc, one_line=False) == f"error: {bad}: 4 problems:"
    assert "  - swarm.lanes.api.depends_on: unknown lane 'dbb' (did you mean 'db'?)" in proc.stderr.splitlines()

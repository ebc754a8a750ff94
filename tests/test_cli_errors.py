"""Bad input to starter.py: exit code 2 and one line on stderr, "error: ...", naming the problem.

Every case here fails while the starter checks its input, before it connects
to Temporal. The subprocess gets TEMPORAL_ADDRESS=127.0.0.1:1, so a case that
wrongly got as far as connecting would fail with a different message.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reposwarm.lanes.loading import ENV_KNOBS, check_lane_graph, load_lanes_file, load_plan_file

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "reposwarm" / "demo"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

GOOD_LANES = """\
swarm:
  lanes:
    db: {allowed_paths: ["db/"]}
    api: {allowed_paths: ["api/"], read_only_paths: ["db/"], depends_on: [db]}
validation:
  profile: default
  profiles:
    default:
      commands:
        - ["python3", "-c", "pass"]
"""


def run_starter(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run starter.py for real, with the environment knobs cleared and Temporal unreachable."""
    full_env = {k: v for k, v in os.environ.items() if k not in ENV_KNOBS and not k.startswith("TEMPORAL_")}
    full_env.update(GIT_ENV)
    full_env["TEMPORAL_ADDRESS"] = "127.0.0.1:1"
    full_env.update(env or {})
    return subprocess.run([sys.executable, str(ROOT / "starter.py"), *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=60)


def make_repo(tmp_path: Path, lanes_yaml: str | None = None) -> Path:
    """A real git repository with one commit; lanes_yaml, if given, is written (untracked) as reposwarm.yaml."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("hello\n")
    env = {**os.environ, **GIT_ENV}
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "initial"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, env=env, capture_output=True)
    if lanes_yaml is not None:
        (repo / "reposwarm.yaml").write_text(lanes_yaml)
    return repo


def error_line(proc: subprocess.CompletedProcess[str], *, one_line: bool = True) -> str:
    """Check the one-line error contract and return that line (the first line, if one_line is False)."""
    assert proc.returncode == 2, f"exit {proc.returncode}; stdout={proc.stdout!r} stderr={proc.stderr!r}"
    # (a note is no error: "note: using the repository's own reposwarm.yaml ..." may come before it; nor is a
    # warning: "warning: ...: 'db/' matches no tracked file at HEAD")
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith(("note: ", "warning: "))]
    assert lines, "nothing on stderr"
    if one_line:
        assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {proc.stderr!r}"
    line = lines[0]
    assert line.startswith("error: "), line
    assert "Temporal" not in line and "127.0.0.1:1" not in line, f"reached the connection step: {line}"
    assert proc.stdout == "", proc.stdout
    return line


def run_in_repo(repo: Path | str, *extra: str, env: dict[str, str] | None = None) -> str:
    return error_line(run_starter("run", "--repo", str(repo), "--task", "x", *extra, env=env))


# --- the repository ---


def test_missing_repository(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    line = run_in_repo(missing)
    assert "no such repository" in line
    assert str(missing) in line


def test_folder_that_is_not_git(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    line = run_in_repo(folder)
    assert "not a git repository" in line
    assert str(folder) in line


def test_no_lanes_file(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    line = run_in_repo(repo)
    assert "no lanes file" in line
    assert "--lanes" in line
    assert f"try --repo {repo}" in line  # the offline first step, which proposes a lanes file


def test_a_remote_that_cannot_be_read_names_it(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/no-such-remote.git"
    lanes = tmp_path / "lanes.yaml"
    lanes.write_text(GOOD_LANES)
    line = error_line(run_starter("run", "--repo", url, "--task", "x", "--lanes", str(lanes), "--model",
                                  "openai:gpt-4.1"))
    assert "cannot read the repository" in line and url in line


def test_a_remote_url_with_a_token_in_it_is_refused_without_showing_it(tmp_path: Path) -> None:
    lanes = tmp_path / "lanes.yaml"
    lanes.write_text(GOOD_LANES)
    line = error_line(run_starter("run", "--repo", "https://bob:ghp_s3cretvalue@example.com/x.git", "--task", "x",
                                  "--lanes", str(lanes), "--model", "openai:gpt-4.1"))
    assert "password or token" in line and "ghp_s3cretvalue" not in line


def test_a_remote_needs_a_lanes_file_and_a_base_it_has(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    url = f"file://{repo}"
    line = run_in_repo(url)  # (with a model, the run would propose its lanes on a worker: tests/test_proposing_config.py)
    assert "with no lanes file and no model: pass --lanes FILE" in line and "proposes its lanes on a worker" in line
    lanes = tmp_path / "lanes.yaml"
    lanes.write_text(GOOD_LANES)
    line = error_line(run_starter("run", "--repo", url, "--task", "x", "--lanes", str(lanes), "--model",
                                  "openai:gpt-4.1", env={"BASE_BRANCH": "nope"}))
    assert "'nope'" in line and "not a branch of" in line


def test_folder_inside_a_repository(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, GOOD_LANES)
    sub = repo / "sub"
    sub.mkdir()
    line = run_in_repo(sub)
    assert "inside the git repository" in line
    assert str(sub) in line


# --- the lanes file ---


BAD_YAML = "swarm: {lanes: [unclosed\n  : : :\n"


def test_lanes_file_not_yaml(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, BAD_YAML)
    proc = run_starter("run", "--repo", str(repo), "--task", "x")
    line = error_line(proc, one_line=False)  # the one-line rule is checked below
    assert str(repo / "reposwarm.yaml") in line
    assert "not valid YAML" in line


def test_lanes_file_not_yaml_is_one_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, BAD_YAML)
    line = run_in_repo(repo)
    assert "not valid YAML" in line


def test_lanes_file_given_with_lanes_flag(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    missing = tmp_path / "elsewhere.yaml"
    line = run_in_repo(repo, "--lanes", str(missing))
    assert str(missing) in line
    assert "no such file" in line


def test_lane_missing_allowed_paths(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, "swarm:\n  lanes:\n    X: {token_budget: 1000}\n")
    line = run_in_repo(repo)
    assert "swarm.lanes.X.allowed_paths" in line
    assert str(repo / "reposwarm.yaml") in line


def test_lane_with_empty_allowed_paths(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, "swarm:\n  lanes:\n    X: {allowed_paths: []}\n")
    line = run_in_repo(repo)
    assert "swarm.lanes.X.allowed_paths" in line


def test_depends_on_cycle(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, """\
swarm:
  lanes:
    a: {allowed_paths: ["a/"], depends_on: [b]}
    b: {allowed_paths: ["b/"], depends_on: [a]}
""")
    line = run_in_repo(repo)
    assert "depends_on cycle" in line
    assert "a -> b -> a" in line or "b -> a -> b" in line


def test_depends_on_unknown_lane(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, """\
swarm:
  lanes:
    a: {allowed_paths: ["a/"], depends_on: [ghost]}
""")
    line = run_in_repo(repo)
    assert "unknown lane 'ghost'" in line
    assert "swarm.lanes.a.depends_on" in line


# --- the plan file ---


def test_plan_names_unknown_lane(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, GOOD_LANES)
    plan = tmp_path / "plan.yaml"
    plan.write_text("interface_contract: c\nlanes:\n  - {lane: db, goal: g}\n  - {lane: web, goal: g}\n")
    line = run_in_repo(repo, "--plan", str(plan))
    assert "unknown lane 'web'" in line
    assert str(plan) in line
    assert "the lanes file defines api, db" in line


# --- the model ---


def test_replay_script_not_found(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, GOOD_LANES)
    line = run_in_repo(repo, "--model", "replay:/nonexistent.yaml")
    assert "replay script not found" in line
    assert "/nonexistent.yaml" in line


def test_model_without_provider(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, GOOD_LANES)
    line = run_in_repo(repo, "--model", "nocolon")
    assert "provider:model" in line
    assert "nocolon" in line


# --- environment knobs ---


def test_max_parallel_helpers_not_an_integer(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, GOOD_LANES)
    line = run_in_repo(repo, env={"MAX_PARALLEL_HELPERS": "abc"})
    assert "MAX_PARALLEL_HELPERS" in line
    assert "abc" in line


def test_unknown_test_profile(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, GOOD_LANES)
    line = run_in_repo(repo, env={"TEST_PROFILE": "nope"})
    assert "TEST_PROFILE" in line
    assert "nope" in line
    assert "default" in line  # the profiles there are


def test_base_branch_not_a_commit(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, GOOD_LANES)
    line = run_in_repo(repo, env={"BASE_BRANCH": "no-such-branch"})
    assert "BASE_BRANCH" in line
    assert "no-such-branch" in line


def test_valid_input_gets_as_far_as_connecting(tmp_path: Path) -> None:
    """The control case: good input passes every check and fails only at 127.0.0.1:1."""
    repo = make_repo(tmp_path, GOOD_LANES)
    proc = run_starter("run", "--repo", str(repo), "--task", "x", "--model", f"replay:{DEMO / 'replay.yaml'}")
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 2 and lines[1].startswith("error: cannot reach Temporal at 127.0.0.1:1"), proc.stderr
    assert lines[0].startswith("note: using the repository's own reposwarm.yaml (untrusted"), proc.stderr


def test_validation_timeout_not_a_number(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, GOOD_LANES)
    line = run_in_repo(repo, env={"VALIDATION_TIMEOUT_S": "soon"})
    assert "VALIDATION_TIMEOUT_S" in line
    assert "soon" in line


@pytest.mark.parametrize("value", ["-5", "nan"])
def test_validation_timeout_must_be_positive(tmp_path: Path, value: str) -> None:
    repo = make_repo(tmp_path, GOOD_LANES)
    line = run_in_repo(repo, "--model", f"replay:{DEMO / 'replay.yaml'}", env={"VALIDATION_TIMEOUT_S": value})
    assert "VALIDATION_TIMEOUT_S" in line


def test_swarm_branch_already_exists(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, GOOD_LANES)
    line = run_in_repo(repo, env={"SWARM_BRANCH": "main"})
    assert "SWARM_BRANCH" in line
    assert "already exists" in line


def test_swarm_branch_not_a_branch_name(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, GOOD_LANES)
    line = run_in_repo(repo, env={"SWARM_BRANCH": "bad..name"})
    assert "SWARM_BRANCH" in line
    assert "not a valid branch name" in line


# --- argparse ---


def test_reject_needs_a_comment() -> None:
    proc = run_starter("reject", "RUN")
    assert proc.returncode == 2
    assert "--comment" in proc.stderr
    assert "required" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("starter.py reject: error: ")


# --- the bundled example loads ---


def test_demo_lanes_and_plan_load() -> None:
    config = load_lanes_file(DEMO / "lanes.yaml")
    assert set(config.swarm.lanes) == {"db_migration", "api_layer", "client", "test_author"}
    plan = load_plan_file(DEMO / "plan.yaml", config)
    assert {lane.lane for lane in plan.lanes} == set(config.swarm.lanes)
    order = check_lane_graph(config.swarm.lanes, "demo")
    assert sorted(order) == sorted(config.swarm.lanes)
    assert order.index("test_author") > order.index("api_layer")
    assert order.index("test_author") > order.index("client")


def test_an_empty_task_is_one_error_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, GOOD_LANES)
    line = error_line(run_starter("run", "--repo", str(repo), "--task", "  "))
    assert line.startswith("error: --task is empty: say in words what to change")


def test_every_option_says_what_it_is_for() -> None:
    """`--help` of every command explains each of its options and arguments; `--version` answers."""
    import argparse

    from reposwarm.cli.main import parser

    unexplained = []
    top = parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            if name == "worker" and action.dest == "worker_args":
                continue  # (worker.py's own options: reposwarm worker --help shows them)
            if not action.help:
                unexplained.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert unexplained == []
    version = run_starter("--version")
    assert version.returncode == 0 and version.stdout.startswith("reposwarm ")


def test_web_ui_links_follow_the_dev_server_s_ui_port(monkeypatch: pytest.MonkeyPatch) -> None:
    from reposwarm.cli.common import ui_url

    monkeypatch.delenv("REPOSWARM_UI_URL", raising=False)
    monkeypatch.setenv("TEMPORAL_ADDRESS", "localhost:7300")
    monkeypatch.delenv("TEMPORAL_UI_PORT", raising=False)
    assert ui_url("r1").startswith("http://localhost:8300/namespaces/")
    monkeypatch.setenv("TEMPORAL_UI_PORT", "9233")  # ./temporal-dev's own setting
    assert ui_url("r1").startswith("http://localhost:9233/namespaces/")
    made = subprocess.run(["make", "-n", "demo", "TEMPORAL_UI_PORT=9233"], cwd=ROOT, capture_output=True, text=True)
    assert "Web UI: http://localhost:9233" in made.stdout


# --- the worker ---


def test_reposwarm_worker_help_shows_the_worker_s_own_options() -> None:
    """`reposwarm worker --help` is worker.py's help (its flags, not a REMAINDER), and its flags are read."""
    helped = run_starter("worker", "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: starter.py worker ")
    assert "--serve {all,workflows,activities}" in helped.stdout and "--concurrency N" in helped.stdout
    bad = run_starter("worker", "--serve", "everything")
    assert bad.returncode == 2 and "argument --serve: invalid choice: 'everything'" in bad.stderr


@pytest.mark.parametrize("argv", [["starter.py", "worker", "--serve", "workflows"], ["worker.py"]])
def test_a_worker_with_no_temporal_server_says_so_in_one_line(argv: list[str]) -> None:
    """A worker that cannot reach the server: one line naming the address, why, and how to start one; exit 2."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    env["TEMPORAL_ADDRESS"] = "127.0.0.1:1"
    proc = subprocess.run([sys.executable, str(ROOT / argv[0]), *argv[1:]], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: cannot reach Temporal at 127.0.0.1:1: Connection refused "), lines[0]
    assert lines[0].endswith("(start it: reposwarm dev-server --background; in a checkout, ./temporal-dev "
                             "--background or make dev-server)"), lines[0]

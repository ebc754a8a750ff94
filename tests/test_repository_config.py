"""A repository's own configuration (reposwarm.yaml, helpers.yaml or .reposwarm.yaml at its root) is its author's:
what it may not set is refused by the key as the user wrote it, with what it may set (issue 48); the real starter,
on a real repository, Temporal unreachable (tests/test_cli_errors.py's harness)."""

from __future__ import annotations

from pathlib import Path

import yaml

from reposwarm.cli.common import REPOSITORY_MAY_SET
from tests.test_cli_errors import error_line, make_repo, run_starter

PROFILE = {"timeout_s": 100, "memory_mb": 4096,
           "commands": [["python3", "-c", "pass"], {"run": ["python3", "-c", "1"], "when": ["api/**"], "shards": 2}],
           "env": {"A": "b"}, "setup": [["true"]]}
LANES = {"api": {"allowed_paths": ["api/"]}}


def repo_with(tmp_path: Path, name: str, config: dict[str, object]) -> Path:
    repo = make_repo(tmp_path)
    (repo / name).write_text(yaml.safe_dump(config))
    return repo


def test_a_lanes_file_in_the_repository_is_refused_by_the_keys_its_author_wrote(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, ".reposwarm.yaml", {"swarm": {"lanes": LANES},
                                                   "validation": {"profiles": {"default": PROFILE}}})
    proc = run_starter("run", "--repo", str(repo), "--task", "x", "--model", "openai:gpt-4.1")
    line = error_line(proc)
    assert f"{repo / '.reposwarm.yaml'}: the repository's own lanes file may not set " \
           "validation.profiles.default.env, validation.profiles.default.commands.1.shards, " \
           "validation.profiles.default.commands.1.when, validation.profiles.default.setup;" in line, line
    assert "rules" not in line  # (what `when:` and `shards:` become inside: no key the user wrote)
    assert line.endswith(f"It may set {REPOSITORY_MAY_SET}") and "--lanes FILE" in line
    # .reposwarm.yaml is looked for too, and said to be used
    assert "note: using the repository's own .reposwarm.yaml (untrusted: it may set its lanes" in proc.stderr


def test_a_configuration_in_the_repository_is_refused_alike(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, "reposwarm.yaml", {"validation": {"profiles": {"default": PROFILE}},
                                                  "delivery": {"draft": True}})
    line = error_line(run_starter("run", "--repo", str(repo), "--task", "x", "--model", "openai:gpt-4.1"))
    assert "the repository's own configuration may not set delivery.draft, validation.profiles.default.env, " \
           "validation.profiles.default.commands.1.shards, validation.profiles.default.commands.1.when, " \
           "validation.profiles.default.setup;" in line, line
    assert line.endswith(f"It may set {REPOSITORY_MAY_SET}") and "--config FILE" in line


def test_what_it_may_set_goes_through(tmp_path: Path) -> None:
    """The control case: commands as argv lists and their limits, lanes, swarm settings and prices get as far as
    connecting to Temporal (unreachable here)."""
    allowed = {key: value for key, value in PROFILE.items() if key not in ("env", "setup")}
    allowed["commands"] = [["python3", "-c", "pass"], ["python3", "-c", "1"]]
    repo = repo_with(tmp_path, "helpers.yaml", {
        "swarm": {"max_parallel": 2, "cost_budget_usd": 5, "lanes": LANES},
        "validation": {"profiles": {"default": allowed}},
        "prices": {"openai:gpt-4.1": {"input_per_mtok": 2, "output_per_mtok": 8}}})
    proc = run_starter("run", "--repo", str(repo), "--task", "x", "--model", "openai:gpt-4.1")
    assert proc.returncode == 2 and "cannot reach Temporal at 127.0.0.1:1" in proc.stderr, proc.stderr
    assert "may not set" not in proc.stderr

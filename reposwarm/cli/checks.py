"""`reposwarm checks --repo R [--lanes FILE] [--profile P]`: the check profile run once on the repository's HEAD,
in the sandbox, as a run would run it (a throwaway worktree of HEAD, the setup step and its cache, the language
caches), and per command what ran, the tests found, the verdict and what to fix. The user's checkout is only
read: its ignored folders are looked at, to say which dependencies a checked tree will not have."""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from pathlib import Path

from reposwarm.checks import evidence, exercised, sandbox
from reposwarm.checks.runner import run_profile
from reposwarm.checks.runners import reasons
from reposwarm.checks.runners.prefixes import programs
from reposwarm.cli.common import UserError, check_repo, git_out, load_config
from reposwarm.contracts import CheckProfile, CommandResult, TestReport
from reposwarm.runs.store import home
from reposwarm.text import inert_line
from reposwarm.vcs import gitcmd

# Ignored folders of a checkout that hold a project's dependencies: a checked tree (a clean worktree) has none.
DEPENDENCY_FOLDERS = ("node_modules", ".venv", "venv", "vendor", ".yarn", ".pnpm-store", "bower_components")
# what a runner says when a dependency is not installed (node, python, go, rust)
MISSING_MODULE = re.compile(r"Cannot find (module|package)|ERR_MODULE_NOT_FOUND|ENOTCACHED|ModuleNotFoundError|No module named|"
                            r"no required module provides|cannot find package|unresolved import|can't find crate")
NOT_FOUND = ("command not found", "No such file or directory", "not found", "exit 127")


def profile_of(config_profiles: dict[str, CheckProfile], wanted: str) -> CheckProfile:
    if not config_profiles:
        raise UserError("the lanes file has no validation.profiles: add one (validation: {profiles: {default: "
                        "{commands: [[python, -m, pytest, -q]]}}})")
    if wanted not in config_profiles:
        raise UserError(f"no check profile {wanted!r}: the lanes file has {', '.join(sorted(config_profiles))}")
    return config_profiles[wanted]


def missing_dependencies(repo: Path, profile: CheckProfile) -> list[str]:
    """Ignored dependency folders of the user's checkout that a checked tree will not have."""
    if profile.setup:
        return []
    done = gitcmd.run(["-C", str(repo), "ls-files", "-z", "--others", "--ignored", "--exclude-standard",
                       "--directory"], capture_output=True)
    ignored = [p.rstrip("/") for p in done.stdout.decode("utf-8", "replace").split("\0") if p.endswith("/")]
    # (a venv of the checkout a command names by absolute path is bound into the checks: not missing)
    named = [Path(p) for argv in profile.commands for p in programs(argv) if p.startswith("/")]
    return [p for p in ignored if Path(p).name in DEPENDENCY_FOLDERS and p not in profile.deps_from_checkout
            and not any(repo / p in n.parents for n in named)]


def advice(result: CommandResult, profile: CheckProfile, missing: list[str], tests_failed: int,
           said: str) -> list[str]:
    """What to fix about one command, plainly. `said`: its output's tail and its failures' messages."""
    out: list[str] = []
    tail = result.output_tail
    # (the program the reason names: `env X=1 /x/python` missing its python blames /x/python, not env)
    program = reasons.missing_program(result.reason) or result.argv[0]
    if result.exit_code == 127 or reasons.missing_program(result.reason) or (
            result.exit_code not in (0, None) and program in tail and any(n in tail for n in NOT_FOUND[:3])):
        out.append(f"`{program}` was not found in the sandbox: it sees the system folders, the worker's PATH and "
                   "the toolchains on it, and the profile's read_only_paths; install it there, put its folder on "
                   "the worker's PATH, or name it in read_only_paths")
    if missing and result.exit_code not in (0, None) and (not tests_failed or MISSING_MODULE.search(said)):
        folders = ", ".join(missing)
        out.append(f"your checkout has {folders} (ignored), which a checked tree never has: add a setup step "
                   f"(setup: [[npm, ci]], [[uv, sync]]...) or deps_from_checkout: [{missing[0]}]")
    if not result.runner and result.exit_code is not None:
        out.append("reposwarm cannot read this command's results per test, so a red base makes every run "
                   "'not judged': run a runner it reads (pytest, unittest, node --test, jest, vitest, mocha, go "
                   "test, cargo test), or make the command write JUnit XML to {junit}")
    if result.reason and not tests_failed and not re.fullmatch(r"exit(ed)?( with)? \d+", result.reason):
        out.append(result.reason)
    if result.unparsed_results:
        out.append(f"its output holds {result.unparsed_results} test result(s) its {result.runner} parser did "
                   "not read: per-test verdicts would be incomplete")
    return out


def failed_tests(result: CommandResult, report: TestReport) -> list[str]:
    return [f.name for f in report.failures if f.command == " ".join(result.argv) and f.name != f.command]


def verdict_line(result: CommandResult, report: TestReport) -> str:
    failed = failed_tests(result, report)
    if result.timed_out:
        return "timed out"
    if result.exit_code == 0 and not failed:
        return "passed"
    if failed:
        shown = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
        return f"failed: {len(failed)} test(s) failed ({shown})"
    return f"failed (exit {result.exit_code})"


def render(report: TestReport, profile: CheckProfile, missing: list[str]) -> list[str]:
    lines = [f"  {line}" for line in report.setup]
    for result in report.commands:
        runner = result.runner or "no per-test results"
        found = f"{result.tests_run} tests ran" if result.tests_run is not None else "tests: not counted"
        lines.append(f"- `{' '.join(result.argv)}` ({runner}; {found}; {result.duration_s:.1f}s): "
                     f"{verdict_line(result, report)}")
        said = "\n".join([result.output_tail, *(f.message for f in report.failures
                                                 if f.command == " ".join(result.argv))])
        lines += [f"    fix: {a}" for a in advice(result, profile, missing, len(failed_tests(result, report)), said)]
        lines += [f"    {line}" for line in loaded_lines(result)]
    for flaky in report.flaky:
        lines.append(f"  flaky: {flaky.name} failed, then passed on a re-run")
    lines += [f"  {line}" for line in exercised.lines(report)]
    return lines


def loaded_lines(result: CommandResult) -> list[str]:
    """What the command's processes loaded of the tree (reposwarm/checks/evidence/): a file of the tree loaded from
    outside it is what makes a run's check NOT JUDGED once a lane changes it, so it is a fix here already."""
    loaded = result.loaded
    if loaded is None:
        return []
    out = []
    if loaded.inside or loaded.languages:
        runtimes = f" ({', '.join(loaded.languages)})" if loaded.languages else ""
        out.append(f"loaded from the tree: {len(loaded.inside)} source file(s){runtimes}")
    if loaded.outside:
        first, where = next(iter(loaded.outside.items()))
        out.append(f"fix: {len(loaded.outside)} file(s) of the tree were loaded from outside it (`{first}` from "
                   f"{where}): a change to them would be NOT JUDGED; {exercised.FIX}")
        # (by folder: "`src/attr/` (19 files) was loaded from /usr/lib/python3/dist-packages/attr/")
        out += [f"  {line}" for line in evidence.shadowing(loaded)[:5]]
    if loaded.note:
        out.append(f"evidence: {loaded.note}")
    return [inert_line(line)[:600] for line in out]


def outside_any(report: TestReport) -> bool:
    """Whether any command loaded a file of the tree from outside it."""
    return any(r.loaded is not None and r.loaded.outside for r in report.commands)


def chosen_profile(args: argparse.Namespace, repo: Path) -> tuple[str, CheckProfile]:
    """The lanes file's profile; with no lanes file, the one a run with none detects from HEAD's files, printed
    with what was found, what was chosen and why (reposwarm/intel/detected.py)."""
    from reposwarm.cli.common import LANES_FILE_NAMES

    if args.lanes or any((repo / n).is_file() for n in LANES_FILE_NAMES):
        # (the profile is all a check needs: the repository's configuration may hold no lanes)
        path, config = load_config(repo, args.lanes, need_lanes=False)
        if config.validation.profiles or args.profile:
            name = args.profile or config.validation.profile
            return name, profile_of(config.validation.profiles, name)
        print(f"{path.name} has no validation.profiles: the detected profile runs, as in a run with it")
    elif args.profile:
        raise UserError(f"--profile {args.profile}: there is no lanes file to name it (--lanes FILE, or one of "
                        f"{', '.join(LANES_FILE_NAMES)} in {repo}); without one the detected profile runs")
    from reposwarm.intel.detected import detect_at

    found, notes = detect_at(repo, "HEAD")
    print("no lanes file: the profile detected from HEAD's files (what `reposwarm try` and a run with no lanes "
          "file check with):")
    for note in notes:
        print(f"  {inert_line(note)}")
    if found is None:
        raise UserError(f"no tests found in {repo}: add validation.profiles to a lanes file (docs/checks.md)")
    profile = CheckProfile.model_validate(found)
    for key, commands in (("setup", profile.setup), ("commands", profile.commands)):
        for argv in commands:
            print(f"  {key}: {inert_line(' '.join(argv))}")
    return "detected", profile


async def run_at(repo: Path, head: str, profile: CheckProfile) -> TestReport:
    """The profile run once on commit `head`, in a throwaway detached worktree (removed after), in the sandbox as a
    run would: the user's branches and working tree are not touched (`reposwarm init` confirms its profile so)."""
    folder = home() / "checks"
    folder.mkdir(parents=True, exist_ok=True)
    tree = Path(tempfile.mkdtemp(prefix="head-", dir=folder))
    shutil.rmtree(tree)
    gitcmd.run(["-C", str(repo), "worktree", "add", "-q", "--detach", str(tree), head], check=True,
               capture_output=True)
    try:
        # (the user's HEAD is the user's code: its caches are the ones a run's base commit fills)
        return await run_profile(profile, tree, None, scope="base")
    finally:
        gitcmd.run(["-C", str(repo), "worktree", "remove", "--force", str(tree)], capture_output=True)
        shutil.rmtree(tree, ignore_errors=True)


async def cmd_checks(args: argparse.Namespace) -> int:
    repo = check_repo(args.repo)
    name, profile = chosen_profile(args, repo)
    from reposwarm.cli import preflight

    preflight.refuse_missing(profile, *preflight.tree_of(repo, "HEAD"))
    head = git_out(repo, "rev-parse", "--verify", "HEAD^{commit}")
    if (why := sandbox.status()) is not None:
        print(f"warning: {why}")
    print(f"running profile {name!r} ({len(profile.commands)} command(s)"
          f"{', after its setup step' if profile.setup else ''}) on HEAD {head[:12]} of {repo}, in the sandbox as a "
          f"run would; up to {profile.timeout_s:.0f}s per command...", flush=True)
    report = await run_at(repo, head, profile)
    missing = missing_dependencies(repo, profile)
    for line in render(report, profile, missing):
        print(line)
    if report.passed:
        print(f"all {len(report.commands)} command(s) passed"
              + (f"; {report.tests_run} tests ran" if report.tests_run is not None else "")
              + ("; but they loaded files of the tree from outside it: a run's change to those would be NOT "
                 "JUDGED, fix what is marked 'fix:' first" if outside_any(report) else ""))
        return 0
    print("not green on HEAD: a run still works (failures on the base commit are never blamed on the swarm), "
          "but fix what is marked 'fix:' first where it applies")
    return 1

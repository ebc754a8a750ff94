"""`reposwarm init --repo PATH [--model M] [--yes] [--force]`: the repository's configuration, written once, so a
run on it is `init`, `worker`, `run --task`.

It writes `reposwarm.yaml` at the repository's root in the form with no lanes (a run proposes its lanes per task,
reposwarm/lanes/loading.py read_configuration): the check profile detected from HEAD's files (reposwarm/intel/detected.py,
as `reposwarm checks` and a run with no lanes file find it), confirmed by running it once on HEAD in the sandbox as
`reposwarm checks` does, with the fix it needs where one is mechanical (the checkout's ignored dependency folders,
which a checked tree lacks, bound read-only) and the rest said in the file's comments; the model as `swarm.model`
and its price from reposwarm's list prices (reposwarm/models/prices.py), written out so the user sees and edits
them; delivery as a branch in the repository. The file is checked with the project's own loader before it is
written. An existing reposwarm.yaml, .reposwarm.yaml or helpers.yaml is never replaced without --force.

What a repository's own file may not set (anyone with a commit could have written it: a setup step, its env,
deps_from_checkout) never goes into reposwarm.yaml, where every run, `checks` and `doctor` that found it would refuse
it: a detected profile that sets them is shown commented out (a run with no profile detects the same one), and a
profile init fixed goes, with the rest, into the user's own file in the checkout's git folder, given by --config.

Nothing else of the user's is touched: the profile runs in a throwaway worktree of HEAD (removed after), and the
file is written, never committed: the user reviews and commits it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from reposwarm.cli.common import UserError, check_repo, git_out, resolve_model
from reposwarm.text import inert_line

CONFIG_NAME = "reposwarm.yaml"
# What a run would read as the repository's configuration or lanes file, before or instead of the new file.
TAKEN = ("reposwarm.yaml", ".reposwarm.yaml", "helpers.yaml")
KEYS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
COMMENT_CHARS = 400  # of one comment (a failure's message, a note): the file stays readable
COMMENT_WIDTH = 110


@dataclass
class Confirmed:
    """The profile to write and what running it on HEAD said, as the file's comment lines."""

    profile: dict[str, Any] | None
    lines: list[str] = field(default_factory=list)
    passed: bool | None = None  # None: not run (no tests found, a missing toolchain)
    as_detected: bool = True  # False: init changed it (a fix), so a run with no profile would not find it alone


def comment(lines: list[str]) -> str:
    """Lines as YAML comments, wrapped; each made one inert line first (a test's message is the repository's
    text: no line break of its own may end the comment early)."""
    out = []
    for line in lines:
        lead = " " * (len(line) - len(line.lstrip(" ")))  # (a commented-out key keeps its indentation)
        text = lead + inert_line(line)[:COMMENT_CHARS]
        out += [f"# {part}" for part in textwrap.wrap(text, COMMENT_WIDTH, subsequent_indent="  ",
                                                        break_long_words=False, break_on_hyphens=False) or [""]]
    return "".join(f"{line.rstrip()}\n" for line in out)


async def confirm_profile(repo: Path, head: str) -> Confirmed:
    """The detected profile, run once on HEAD as `reposwarm checks` runs it; where it fails for want of the
    checkout's ignored dependency folders, run again with them bound (deps_from_checkout), kept if that passes."""
    from reposwarm.checks import sandbox
    from reposwarm.cli import preflight
    from reposwarm.cli.checks import missing_dependencies, render, run_at
    from reposwarm.contracts import CheckProfile
    from reposwarm.intel.detected import detect_at

    found, notes = detect_at(repo, "HEAD")
    print("the check profile detected from HEAD's files:")
    for note in notes:
        print(f"  {inert_line(note)}")
    if found is None:
        return Confirmed(None, ["no tests found in HEAD's files: a run has no checks until you add "
                                "validation.profiles (docs/checks.md), then `reposwarm checks --repo .`"])
    try:
        profile = CheckProfile.model_validate(found)
    except ValidationError as err:  # (made from the repository's files: said, never a crash)
        invalid = inert_line(str(err))[:COMMENT_CHARS]
        print(f"the detected profile is not one a run takes: {invalid}")
        return Confirmed(None, [f"the profile detected from HEAD's files is not one a run takes ({invalid}): add "
                                "validation.profiles yourself (docs/checks.md)"])
    try:
        preflight.refuse_missing(profile, *preflight.tree_of(repo, "HEAD"))
    except UserError as err:  # (a toolchain this host lacks: said, and the profile still written)
        print(f"not run on HEAD: {err}")
        return Confirmed(found, [f"not run on HEAD {head[:12]}: {err}",
                                 "fix: install it where the worker runs, then `reposwarm checks --repo .`"])
    said = [f"warning: {why}"] if (why := sandbox.status()) is not None else []
    for line in said:
        print(line)
    print(f"running it once on HEAD {head[:12]}, in the sandbox as a run would; up to {profile.timeout_s:.0f}s "
          "per command ...", flush=True)
    report = await run_at(repo, head, profile)
    missing = missing_dependencies(repo, profile)
    lines = render(report, profile, missing)
    print(*lines, sep="\n")
    if not report.passed and missing:
        fixed = {**found, "deps_from_checkout": missing}
        print(f"trying the fix: deps_from_checkout: [{', '.join(missing)}] (your checkout's ignored "
              f"{', '.join(missing)}, bound read-only into each checked tree) ...", flush=True)
        again = await run_at(repo, head, CheckProfile.model_validate(fixed))
        if again.passed:
            again_lines = render(again, CheckProfile.model_validate(fixed), [])
            print(*again_lines, sep="\n")
            return Confirmed(fixed, [*said, *verdict(again, head, again_lines), *again_lines,
                                     f"fixed: deps_from_checkout: [{', '.join(missing)}]: it failed without your "
                                     "checkout's ignored dependency folders, which a checked tree never has; a "
                                     "setup step (setup: [[npm, ci]], [[uv, sync]]...) makes them in each tree "
                                     "instead (docs/checks.md)"], True, as_detected=False)
        print("the fix did not make it pass: the detected profile is written as it was")
    return Confirmed(found, [*said, *verdict(report, head, lines), *lines], report.passed)


def verdict(report: Any, head: str, lines: list[str]) -> list[str]:
    """The first comment line on the profile; `lines`: what running it said (rendered)."""
    if report.passed:
        ran = f"; {report.tests_run} tests ran" if report.tests_run is not None else ""
        return [f"passed on HEAD {head[:12]}: all {len(report.commands)} command(s){ran}"]
    said = f"NOT green on HEAD {head[:12]}: a run still works (failures on the base commit are never blamed on the swarm)"
    if any(line.lstrip().startswith("fix:") for line in lines):
        return [f"{said}, but fix what is marked 'fix:' below first where it applies, then `reposwarm checks --repo .`"]
    # (attrs at ca0f0458: one of its own tests fails on HEAD, outside reposwarm too; nothing of the profile's to fix)
    return [f"{said}; nothing below is marked 'fix:': the tests named fail on HEAD as it is, and a run judges its "
            "changes per test against them"]


def commented_yaml(text: str) -> str:
    """YAML as comment lines to uncomment, unwrapped (a wrapped line would not parse), each made inert."""
    lines = [(line[:len(line) - len(line.lstrip(" "))], line) for line in text.splitlines()]
    return "".join(f"#   {lead}{inert_line(line)}\n" for lead, line in lines)


def config_text(repo: Path, model: str | None, confirmed: Confirmed, *, left_to_detection: list[str] | None = None,
                own_file: Path | None = None) -> str:
    """The file: a header, the model, the profile with what running it said, the model's price, delivery.

    `left_to_detection`: the keys of the detected profile a repository's own file may not set (a setup step, its
    env): the profile is shown commented out, since a run with no profile in its configuration detects this same
    one. `own_file`: the file is the user's, kept outside the work tree (a fixed profile that sets such keys)."""
    from reposwarm.models.prices import PRICES_AS_OF, needs_price, shipped_price

    def dump(data: dict[str, Any], flow: bool | None) -> str:
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=flow, width=1000, allow_unicode=True)

    keep = ("Review it, then commit it (reposwarm did not)." if own_file is None else
            f"It is yours, outside the work tree, never committed: its check profile sets what a repository's own "
            f"file may not, so each run is given it (run --config {own_file}; checks and try --lanes {own_file}).")
    out = comment([
        f"{CONFIG_NAME}: {repo.name}'s configuration for reposwarm, written by `reposwarm init`.",
        "No lanes: a run proposes them per task, for you to confirm (docs/lanes.md); the check profiles, prices, "
        f"delivery and defaults stay here. {keep}",
    ])
    out += "\n"
    if model:
        out += dump({"swarm": {"model": model}}, False)
    else:
        out += comment(["swarm:", "  model: anthropic:claude-sonnet-4-5   # the run's model, or --model / "
                        "REPOSWARM_MODEL each run"])
    again = "reposwarm checks --repo ." + (f" --lanes {own_file}" if own_file is not None else "")
    out += "\n" + comment([f"validation: the check profile detected from HEAD's files ({again} runs it again)",
                           *confirmed.lines])
    if confirmed.profile is not None:
        absolute = sorted({argv[0] for argv in confirmed.profile.get("commands", []) if argv[0].startswith("/")})
        if absolute:
            out += comment([f"{', '.join(absolute)}: the interpreter found on this machine, by absolute path: on "
                            "another machine, name that machine's (or python3, or a uv setup step)"])
        block = dump({"validation": {"profile": "default", "profiles": {"default": confirmed.profile}}}, None)
        if left_to_detection:
            out += comment([f"not set here: it sets {', '.join(k.rpartition('.')[2] for k in left_to_detection)}, "
                            "which a repository's own file may not (anyone with a commit could have written it), "
                            "and a run with no profile here detects this same one. To change it, put it in a file of "
                            "your own, given as run --config FILE (checks --lanes FILE):"])
            out += commented_yaml(block)
        else:
            out += block
    out += "\n"
    if model and needs_price(model):
        price = shipped_price(model)
        if price is not None:
            out += comment([f"prices: US dollars per million tokens, {model}'s list price as of {PRICES_AS_OF} "
                            "(standard tier). Edit them for your rates: these are the ones a run counts, and "
                            "cost budgets count against (docs/cost.md)."])
            out += dump({"prices": {model: price.model_dump(exclude_none=True)}}, False)
        else:
            out += comment([f"prices: reposwarm has no list price for {model}: its costs show as tokens until you "
                            "give one (docs/cost.md):", "prices:", f"  {model}: {{input_per_mtok: N, "
                            "cached_input_per_mtok: N, output_per_mtok: N}"])
    elif model:
        out += comment([f"prices: {model} bills nothing, so it needs no price (docs/cost.md)"])
    else:
        out += comment(["prices: reposwarm's list prices apply to the models it knows (docs/cost.md); a line "
                        "here overrides one: {provider:model: {input_per_mtok: N, output_per_mtok: N}}"])
    out += "\n" + comment([
        "delivery: the approved change becomes the branch swarm/<run> in this repository; nothing is pushed. A "
        "remote or a pull request is yours to set, in a file of your own (run --config FILE): a repository's own "
        "file may not set them (docs/configuration.md)."])
    out += dump({"delivery": {"remote": None, "pull_request": False}}, False)
    return out


def user_only_keys(repo: Path, text: str) -> list[str]:
    """The file's text checked as a run reads it, from a scratch copy (nothing is written into the repository
    until it loads): the keys only the user may set (check_written)."""
    with tempfile.TemporaryDirectory(prefix="reposwarm-init-") as scratch:
        draft = Path(scratch) / CONFIG_NAME
        draft.write_text(text, encoding="utf-8")
        return check_written(repo, draft)


def own_file_of(repo: Path) -> Path:
    """Where the user's own file goes when the repository's may not hold it: the checkout's git folder, outside
    the work tree (never committed, never read by a run unless given) and one per checkout."""
    return Path(git_out(repo, "rev-parse", "--absolute-git-dir")) / CONFIG_NAME


def check_written(repo: Path, path: Path) -> list[str]:
    """The file as a run reads it: the project's own loader (every problem a UserError), and the keys that make it
    the user's rather than the repository's (then a run must be given it by --config, not find it)."""
    from reposwarm.cli.common import settings_only_the_user_makes, tracked_files
    from reposwarm.contracts.errors import ConfigError
    from reposwarm.lanes.loading import read_configuration

    try:
        config, _ = read_configuration(path, tracked_files(repo), root=repo, at=" at HEAD")
    except ConfigError as err:  # (a bug here, never the user's: said whole, and nothing is written)
        raise UserError(f"the configuration init made does not load, so it was not written: {err}") from None
    return settings_only_the_user_makes(config)


def write_new(path: Path, text: str, force: bool) -> None:
    """Written whole or not at all; without `force`, never over a file that appeared meanwhile."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        if force:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise UserError(f"{path} appeared meanwhile: not replaced (--force replaces it)") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def next_steps(repo: Path, model: str | None, config_flag: str) -> list[str]:
    from reposwarm.cli.common import prog, worker_hint

    key = KEYS.get((model or "").partition(":")[0])
    needs = f" (it holds the model's key: {key} in its environment)" if key else \
        " (it holds the model's key: ANTHROPIC_API_KEY or OPENAI_API_KEY)" if not model else ""
    model_flag = "" if model else " --model provider:name"
    run = f'{prog()} run --repo {repo}{config_flag}{model_flag} --task "..."'
    return ["next:",
            f"  1. a worker, in another terminal{needs}: {worker_hint()}",
            f"  2. a dry run first (the proposed lanes and each one's estimated cost; nothing dispatched): {run} "
            "--dry-run",
            f"  3. the run: {run}"]


def ask(path: Path) -> bool:
    print(f"write {path}? [Y/n] ", end="", flush=True)
    try:
        answer = input().strip().lower()
    except EOFError:
        return False
    return answer in ("", "y", "yes")


async def cmd_init(args: argparse.Namespace) -> int:
    repo = check_repo(args.repo)
    path = repo / CONFIG_NAME
    taken = [repo / name for name in TAKEN if (repo / name).exists()]
    if taken and not args.force:
        raise UserError(f"{taken[0]} exists: init does not replace it; edit it, or pass --force to write a new "
                        f"{CONFIG_NAME} (a run reads {CONFIG_NAME} first, then helpers.yaml, then .reposwarm.yaml)")
    try:
        head = git_out(repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    except subprocess.CalledProcessError:  # (no commit at all)
        raise UserError(f"{repo} has no commit yet: init runs the checks on HEAD; commit first") from None
    named = args.model or os.environ.get("REPOSWARM_MODEL") or None
    model = resolve_model(named, Path.cwd(), "--model" if args.model else "REPOSWARM_MODEL") if named else None
    if model is not None:
        from reposwarm.models.prices import needs_price, shipped_price, unpriced_line

        if needs_price(model) and shipped_price(model) is None:
            print(f"warning: {unpriced_line(model)}", file=sys.stderr)
    confirmed = await confirm_profile(repo, head)
    text = config_text(repo, model, confirmed)
    user_only = user_only_keys(repo, text)
    if user_only and confirmed.as_detected:
        # (a setup step, its env: detection's own, which a run with no profile finds again; a repository's own
        # file that set them would be refused by every run, `checks` and `doctor` that find it)
        text = config_text(repo, model, confirmed, left_to_detection=user_only)
        user_only = user_only_keys(repo, text)
    if user_only:  # (a fix init made: the user's own file, out of the work tree, given to each run)
        path = own_file_of(repo)
        if path.exists() and not args.force:
            raise UserError(f"{path} exists: init does not replace it; edit it, or pass --force to write a new one")
        text = config_text(repo, model, confirmed, own_file=path)
    print()
    print(text, end="")
    print()
    if not args.yes:
        if not sys.stdin.isatty():
            print(f"not written (no terminal to ask): pass --yes to write {path}")
            return 1
        if not ask(path):
            print("not written")
            return 1
    write_new(path, text, args.force)
    config_flag = ""
    verdict_word = {True: "its profile passed on HEAD", False: "its profile is NOT green on HEAD (see its comments)",
                    None: "its profile was not run (see its comments)"}[confirmed.passed]
    if user_only:  # (deps_from_checkout...: the repository's own file may not set them, so the user's is given)
        config_flag = f" --config {path}"
        print(f"wrote {path}: {verdict_word}. It sets {', '.join(user_only)}, which a repository's own file may not "
              f"set (anyone with a commit could have written it), so it is yours, in the checkout's git folder "
              f"(never committed), and a run is given it with --config; `checks` and `try` with --lanes {path}")
    else:
        print(f"wrote {path}: {verdict_word}. Not committed: review it, then `git -C {repo} add {CONFIG_NAME} && "
              f"git -C {repo} commit -m \"reposwarm configuration\"`")
    print("\n".join(next_steps(repo, model, config_flag)))
    return 0

"""What `reposwarm doctor` checks on this host, and what `try`, `run` and `worker` check before they start: the
platform (Linux, the bubblewrap sandbox and its user namespaces, git's version), the model credentials by name,
the models' prices, the check profile's toolchains and the free disk under REPOSWARM_HOME.

Each check is a Finding: ok, warn or FAIL, what was checked, what was found, and for a problem the fix on one
line. Nothing here prints an environment variable's value, not even a prefix: a credential is named, and said set
or not. The checks reuse the code that will fail later: the sandbox's own probe (reposwarm/checks/sandbox
bwrap()), the providers' own constructors (reposwarm/models provider_for), the toolchain refusal's own search
(reposwarm/intel/toolchain_needs.py, reposwarm/cli/preflight.py), so doctor says what a run would meet.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from reposwarm.contracts import LanesFile

Level = Literal["ok", "warn", "FAIL"]

# `git merge-tree --write-tree` (2.38) merges each lane into the integration branch without a worktree
# (activities/repo.py, activities/converge.py); lane worktrees use `sparse-checkout set --sparse-index` (2.32).
GIT_MINIMUM = (2, 38)
GIT_NEEDS = "git merge-tree --write-tree, which merges the lanes"
# The variable each real provider reads its key from (reposwarm/models/anthropic.py, openai.py), and the one that
# points it at a server of one's own, which may need no key. replay: and oracle: models need no credential.
KEYS = {"anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"), "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
FORGE_KEYS = ("GITHUB_TOKEN", "GH_TOKEN")  # a pull request's (reposwarm/vcs/forge.py)
GIB = 1024 ** 3
DISK_FAIL_GIB, DISK_WARN_GIB = 1, 10  # a lane's worktree of a 64,000-file repository took 525 MiB (DESIGN.md 10)
USERNS_FIX = ("allow unprivileged user namespaces: sysctl -w kernel.unprivileged_userns_clone=1 (Debian), "
              "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap (Ubuntu 23.10+); "
              "in a container, one that allows them (e.g. docker --security-opt seccomp=unconfined "
              "--security-opt apparmor=unconfined); or REPOSWARM_SANDBOX=off to run checks unsandboxed")


@dataclass(frozen=True)
class Finding:
    """One check's answer: `level`, what was checked, what was found; `fix`: how to mend a problem, one line."""

    level: Level
    what: str
    detail: str
    fix: str = ""

    def lines(self) -> list[str]:
        out = [f"{self.level:<4} {self.what}: {self.detail}"]
        if self.fix and self.level != "ok":
            out.append(f"     fix: {self.fix}")
        return out

    @property
    def failed(self) -> bool:
        return self.level == "FAIL"


def is_set(name: str) -> bool:
    """Whether a variable is set to something (as the providers read it: stripped); never its value."""
    return bool(os.environ.get(name, "").strip())


# --- the platform ---


def check_platform() -> Finding:
    """Linux, where the checks' sandbox (bubblewrap: Linux namespaces) exists."""
    system = platform.system()
    if system == "Linux":
        return Finding("ok", "platform", f"Linux {platform.release()} {platform.machine()}, Python "
                                         f"{platform.python_version()}")
    from reposwarm.checks import sandbox

    off = _sandbox_off()
    detail = (f"{system or sys.platform}: the checks' sandbox (bubblewrap) needs Linux namespaces, so on this "
              "platform every check is refused" + (" unless REPOSWARM_SANDBOX=off (set here)" if off else ""))
    fix = f"run the worker on Linux (a VM or container will do); or {sandbox.SWITCH}=off to run checks unsandboxed"
    return Finding("warn" if off else "FAIL", "platform", detail, fix)


def _sandbox_off() -> bool:
    from reposwarm.checks import sandbox

    try:
        return not sandbox.enabled()
    except ValueError:
        return False


def check_sandbox() -> Finding:
    """bubblewrap installed and able to make the checks' sandbox here (user namespaces among it): the sandbox's
    own probe, the one every check makes (reposwarm/checks/sandbox bwrap())."""
    from reposwarm.checks import sandbox

    try:
        enabled = sandbox.enabled()
    except ValueError as err:
        return Finding("FAIL", "sandbox", str(err), f"unset {sandbox.SWITCH}, or set it to on or off")
    if not enabled:
        return Finding("warn", "sandbox", f"{sandbox.SWITCH}=off: {sandbox.OFF_WARNING}",
                       f"install bubblewrap (apt-get install bubblewrap) and unset {sandbox.SWITCH}")
    try:
        found = sandbox.bwrap()
    except sandbox.SandboxUnavailable as err:
        installed = bool(os.environ.get(sandbox.BWRAP)) or shutil.which("bwrap") is not None
        detail = str(err).removeprefix("refused: ")
        fix = USERNS_FIX if installed else (f"apt-get install bubblewrap (dnf install bubblewrap), or "
                                            f"{sandbox.SWITCH}=off to run checks unsandboxed")
        return Finding("FAIL", "sandbox", detail, fix)
    version = _first_line([found, "--version"])
    return Finding("ok", "sandbox", f"{version or 'bubblewrap'} at {found} makes the checks' sandbox here (user, PID, "
                                    "network namespaces)")


def check_git() -> Finding:
    """git on PATH, at least GIT_MINIMUM."""
    found = shutil.which("git")
    if found is None:
        return Finding("FAIL", "git", "git is not installed", "install git 2.38 or later (apt-get install git)")
    text = _first_line([found, "--version"]) or ""
    match = re.search(r"(\d+)\.(\d+)", text)
    if match is None:
        return Finding("warn", "git", f"{found} did not say its version ({text or 'no answer'})",
                       f"install git {GIT_MINIMUM[0]}.{GIT_MINIMUM[1]} or later")
    have = (int(match.group(1)), int(match.group(2)))
    wanted = f"{GIT_MINIMUM[0]}.{GIT_MINIMUM[1]}"
    if have < GIT_MINIMUM:
        return Finding("FAIL", "git", f"{text} at {found}: reposwarm needs {wanted} or later ({GIT_NEEDS})",
                       f"install git {wanted} or later (a distribution's backports, or git-scm.com)")
    return Finding("ok", "git", f"{text.removeprefix('git version ')} at {found} ({wanted}+ needed)")


def _first_line(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip()[:80] if done.returncode == 0 and lines else None


def platform_findings(*, checks_here: bool = True) -> list[Finding]:
    """The platform's checks; `checks_here=False` (an orchestration-only worker): git alone, no sandbox."""
    if not checks_here:
        return [check_git()]
    return [check_platform(), check_sandbox(), check_git()]


# --- the models: credentials by name, prices ---


def provider_of(model: str) -> str:
    return model.partition(":")[0]


def models_in_use(model: str | None, config: LanesFile | None) -> list[str]:
    """The models a run would use: --model, else REPOSWARM_MODEL, else the configuration's swarm.model; and each
    lane's own (in the order given, each once)."""
    named = [model or os.environ.get("REPOSWARM_MODEL", "").strip() or (config.swarm.model if config else None)]
    if config is not None:
        named += [role.model for role in config.swarm.lanes.values()]
    return list(dict.fromkeys(m for m in named if m))


def check_credential(model: str) -> Finding:
    """Whether this environment has what `model`'s provider needs: the provider's own constructor decides (it
    raises the error a model call would), and the finding names the variable, never its value."""
    from reposwarm.models import KNOWN_PROVIDERS, ModelError, provider_for

    provider = provider_of(model)
    if provider not in KEYS:  # (a replay script or an oracle's commit is read where the run reads it, not here)
        if provider in KNOWN_PROVIDERS:
            return Finding("ok", f"credentials for {model}", f"a {provider}: model needs no credential")
        return Finding("FAIL", f"model {model}", f"unknown provider {provider!r} (known: "
                       f"{', '.join(KNOWN_PROVIDERS)})", "name a model as provider:name, e.g. anthropic:NAME")
    key, base_url = KEYS[provider]
    try:
        provider_for(model)
    except ModelError as err:
        said = str(err).replace(" on this worker", " here") + " (a worker started here fails its first call to it)"
        return Finding("FAIL", f"credentials for {model}", said,
                       f"export {key} in the worker's environment (never in a lanes file: it would enter the run's "
                       f"history), or {base_url} for a server of your own that needs none")
    if is_set(key):
        return Finding("ok", f"credentials for {model}", f"{key} is set" + (
            f" (and {base_url})" if is_set(base_url) else ""))
    return Finding("ok", f"credentials for {model}", f"{base_url} is set: a server of your own, no {key}")


def credential_findings(models: Iterable[str], config: LanesFile | None = None) -> list[Finding]:
    """The credentials of the models in use; with none named, which model credentials this environment has (by
    name), since a worker started here serves whatever model a run names. A pull request's token where the
    configuration's delivery asks for one."""
    models = list(models)
    out = [check_credential(m) for m in models]
    if not models:
        have = [key for key, base in KEYS.values() if is_set(key) or is_set(base)]
        said = ", ".join(f"{key} {'set' if is_set(key) else 'not set'}" for key, _ in KEYS.values())
        if have:
            out.append(Finding("ok", "credentials", f"{said} (no model named: --model checks one)"))
        else:
            out.append(Finding("warn", "credentials", f"{said}: a worker started here runs replay: and oracle: "
                                                      "models only",
                               "export ANTHROPIC_API_KEY or OPENAI_API_KEY in the worker's environment"))
    if config is not None and config.delivery.pull_request:
        if any(is_set(k) for k in FORGE_KEYS):
            out.append(Finding("ok", "credentials for pull requests", " or ".join(k for k in FORGE_KEYS if is_set(k))
                               + " is set"))
        else:
            out.append(Finding("FAIL", "credentials for pull requests", "delivery.pull_request is on, and neither "
                               "GITHUB_TOKEN nor GH_TOKEN is set: the approved run's delivery would fail",
                               "export GITHUB_TOKEN (a token that may open pull requests) in the worker's environment"))
    return out


def price_findings(models: Iterable[str], config: LanesFile | None) -> list[Finding]:
    """A price for each real provider's model in use: the configuration's `prices`, else the list price reposwarm
    ships (reposwarm/models/prices.py, as a run looks it up). Without either a run still runs, its costs shown in
    tokens, and a cost budget cannot count it."""
    from reposwarm.models import prices

    out: list[Finding] = []
    for model in models:
        if not prices.needs_price(model):
            continue  # replay: and oracle: bill nothing
        price, source = prices.price_of(model, config.prices if config is not None else {})
        if price is None:
            said, _, fix = prices.unpriced_line(model).partition("; give it one in ")
            out.append(Finding("warn", f"price of {model}", said, f"give it one in {fix}"))
            continue
        source = "the configuration's prices" if source == "configuration" else source
        out.append(Finding("ok", f"price of {model}", f"${price.input_per_mtok:g} in, ${price.output_per_mtok:g} out "
                                                      f"per million tokens ({source})"))
    return out


# --- the repository's checks: their toolchains ---


def toolchain_findings(repo: Path, config: LanesFile | None, rev: str = "HEAD") -> list[Finding]:
    """The toolchains the check profile needs, found where the checks look (as `run` and `try` refuse without
    them): the configuration's profile, else the one a run with none detects."""
    from reposwarm.cli import preflight
    from reposwarm.intel import javascript, toolchain_needs

    profile = preflight.profile_of(config) if config is not None else None
    name = os.environ.get("TEST_PROFILE") or (config.validation.profile if config is not None else "")
    if profile is not None:
        commands = [*profile.setup, *profile.commands]
        which = f"profile {name!r}"
    else:
        from reposwarm.intel.detected import detect_at

        detected, _ = detect_at(repo, rev)
        if detected is None:
            return [Finding("warn", "toolchains", f"no check profile in the configuration, and none detected in "
                                                  f"{repo} (no tests found): a run would have no checks",
                            f"add a validation profile (reposwarm checks --repo {repo} says what it finds)")]
        commands = [*detected.get("setup", []), *detected.get("commands", [])]
        which = "the detected profile"
    files, read = preflight.tree_of(repo, rev)
    hints, problems = javascript.toolchain_hints(files, read)
    needs = toolchain_needs.needs(commands, hints)
    uses = {os.path.basename(p) for argv in commands for p in toolchain_needs.programs(argv)}
    out = [Finding("FAIL", f"toolchain {n.tool}", f"not installed where the checks run (needed by {which}: "
                                                  f"`{' '.join(n.command.split())[:80]}`)", f"install it: {n.hint}")
           for n in needs if n.where is None]
    out += [Finding("FAIL", f"toolchain {tool}", why, "install the version the project names")
            for tool, why in problems.items() if tool in uses]
    found = [(n.tool, n.where) for n in needs if n.where is not None]
    others, gone = other_programs(commands, {n.tool for n in needs})
    found += others
    out += [Finding("FAIL", f"program {program}", f"not found where the checks run (needed by {which}: "
                                                  f"`{' '.join(' '.join(argv).split())[:80]}`)",
                    "recreate that environment, or name this machine's interpreter in the profile's commands"
                    if os.path.isabs(program) else "install it, or put its folder on the worker's PATH (the checks "
                                                   "see the worker's PATH)")
            for program, argv in gone]
    if found or not out:
        shown = ", ".join(f"{tool} at {where}" if tool != where else tool for tool, where in found) \
            or "none beyond the tree's own programs"
        out.insert(0, Finding("ok", "toolchains", f"{which} needs {shown}"))
    return out


def other_programs(commands: list[list[str]], listed: set[str]) -> tuple[list[tuple[str, str]],
                                                                         list[tuple[str, list[str]]]]:
    """The programs the commands run from the host beyond the toolchains (an interpreter by absolute path, as
    init writes a virtual environment's; python3, make...): those found (program, where), and those not (program,
    the command). A program of the tree (./gradlew, node_modules/.bin/jest: a relative path) is the tree's."""
    from reposwarm.intel import toolchain_needs

    found: dict[str, str] = {}
    gone: dict[str, list[str]] = {}
    for argv in commands:
        run = toolchain_needs.programs(argv)
        for program in run:
            if program in listed or program in found or program in gone or (
                    "/" in program and not os.path.isabs(program)):
                continue
            where = toolchain_needs.find(program)
            if where is None:
                gone[program] = list(argv)
            elif program == run[-1] or os.path.isabs(program):  # (not `env`, `timeout`: what runs the program)
                found[program] = where
    return list(found.items()), list(gone.items())


# --- the disk ---


def check_disk() -> Finding:
    """Free space where worktrees, clones and check caches go (REPOSWARM_HOME), and that it can be written."""
    from reposwarm.runs.store import home

    where = home()
    existing = next((p for p in (where, *where.parents) if p.exists()), Path("/"))
    try:
        free = shutil.disk_usage(existing).free
    except OSError as err:
        return Finding("FAIL", "disk", f"cannot read the free space at {existing}: {err}",
                       "set REPOSWARM_HOME to a folder on a disk this user can write")
    if not os.access(existing, os.W_OK):
        return Finding("FAIL", "disk", f"REPOSWARM_HOME {where}: {existing} is not writable by this user",
                       "set REPOSWARM_HOME to a folder this user can write")
    gib = free / GIB
    detail = f"{gib:.1f} GiB free under REPOSWARM_HOME {where}"
    if gib < DISK_FAIL_GIB:
        return Finding("FAIL", "disk", f"{detail}: too little for a clone and the lanes' worktrees",
                       "free space there, or set REPOSWARM_HOME to a larger disk (reposwarm gc removes worktrees "
                       "whose work is safe on a branch)")
    if gib < DISK_WARN_GIB:
        return Finding("warn", "disk", f"{detail}: a large repository's lanes take about 0.5 GiB each",
                       "free space there, or set REPOSWARM_HOME to a larger disk (reposwarm gc --yes)")
    return Finding("ok", "disk", detail)

"""`reposwarm doctor [--repo PATH] [--config FILE] [--model M]`: everything a run needs, checked at once, each as
one line (`ok`, `warn` or `FAIL`, what, what was found) and each problem's fix on the next; exit code 1 when
something FAILs, else 0. The checks: reposwarm/cli/doctor_host.py (this host), doctor_server.py (Temporal).

`try`, `run` and `worker` make the fatal part of them before they start (refuse_*): the platform where the checks
will run on this host, and a worker's credentials for REPOSWARM_MODEL, so what would fail later (every check
refused, the first model call) stops them at once, with its fix. The server being reachable they learn from their
own connection, which says where it looked and how to start one (reposwarm/cli/common.py unreachable): no
second connection.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from reposwarm.cli.common import UserError
from reposwarm.cli.doctor_host import (
    KEYS,
    Finding,
    check_credential,
    check_disk,
    credential_findings,
    is_set,
    models_in_use,
    platform_findings,
    price_findings,
    provider_of,
    toolchain_findings,
)

if TYPE_CHECKING:
    from reposwarm.contracts import LanesFile


def configuration(repo: Path | None, given: str | None) -> tuple[LanesFile | None, Finding | None]:
    """The configuration a run would read (--config, else the repository's own reposwarm.yaml, helpers.yaml or
    .reposwarm.yaml), with what was found; (None, None) when there is none to read."""
    from reposwarm.cli.common import LANES_FILE_NAMES, load_config
    from reposwarm.contracts.errors import ConfigError
    from reposwarm.lanes.loading import apply_env, read_configuration

    if repo is None and not given:
        return None, None
    if repo is not None and not given and not any((repo / n).is_file() for n in LANES_FILE_NAMES):
        return None, Finding("ok", "configuration", f"none in {repo} (a run with none proposes its lanes and detects "
                                                    "its checks)")
    try:
        if repo is not None:
            with contextlib.redirect_stderr(io.StringIO()):  # (its note on a repository's own file: said below)
                path, config = load_config(repo, given, warn=False, need_lanes=False)
        else:
            path = Path(str(given))
            config = apply_env(read_configuration(path)[0])
    except (UserError, ConfigError) as err:
        problems = "; ".join(line.strip() for line in str(err).splitlines() if line.strip())
        return None, Finding("FAIL", "configuration", problems, "correct the file (docs/configuration.md); "
                                                                 "`reposwarm checks --repo PATH` tries its profile")
    from reposwarm.cli.preflight import profile_of

    lanes = len(config.swarm.lanes)
    whose = ", the repository's own" if not given else ""
    name = os.environ.get("TEST_PROFILE") or config.validation.profile
    profile = f"check profile {name!r}" if profile_of(config) is not None else "no check profile: a run detects one"
    return config, Finding("ok", "configuration", f"{path}{whose} ({f'{lanes} lanes' if lanes else 'no lanes'}; "
                                                  f"{profile})")


async def cmd_doctor(args: argparse.Namespace) -> int:
    from reposwarm.cli.common import check_repo
    from reposwarm.cli.doctor_server import reach, server_findings

    repo = check_repo(args.repo) if args.repo else None
    findings = platform_findings()
    client, reached = await reach()
    findings += await server_findings(client, reached)
    config, read = configuration(repo, args.config)
    findings += [read] if read is not None else []
    models = models_in_use(args.model, config)
    findings += credential_findings(models, config)
    findings += price_findings(models, config)
    if repo is not None:
        findings += toolchain_findings(repo, config)
    else:
        findings.append(Finding("ok", "toolchains", "not checked: --repo PATH checks those its check profile needs"))
    findings.append(check_disk())
    for finding in findings:
        print("\n".join(finding.lines()))
    failed = sum(f.failed for f in findings)
    warned = sum(f.level == "warn" for f in findings)
    if failed or warned:
        print(f"doctor: {failed} FAIL, {warned} warn of {len(findings)} checks" + (
            " (a run would fail on each FAIL: mend it first)" if failed else ""))
    else:
        print(f"doctor: all {len(findings)} checks ok")
    return 1 if failed else 0


# --- before a command starts: the fatal checks, each with its fix ---


def refuse(findings: list[Finding]) -> list[Finding]:
    """UserError naming each FAIL and its fix (the command stops before it starts anything); else the warnings."""
    failed = [f for f in findings if f.failed]
    if failed:
        said = [f"{f.what}: {f.detail}" + (f"\n  fix: {f.fix}" if f.fix else "") for f in failed]
        from reposwarm.cli.common import prog

        raise UserError("\n".join(said) + f"\n  ({prog()} doctor checks all that a run needs)")
    return [f for f in findings if f.level == "warn"]


def refuse_here() -> None:
    """`try` (and `run` whose worker is this host): the checks will run here, in the sandbox, with git."""
    refuse(platform_findings())


def refuse_run(repo: str, model: str | None) -> None:
    """`run`: the platform, where its worker is this host (a repository folder here, a Temporal server on
    loopback, as reposwarm/cli/preflight.py decides for the toolchains), and a note on the model's key; a worker
    elsewhere is its own host's."""
    from reposwarm.cli.preflight import worker_is_local

    if worker_is_local(repo):
        refuse_here()
        if (note := credential_note(models_in_use(model, None))) is not None:
            print(note, file=sys.stderr)


def credential_note(models: list[str]) -> str | None:
    """`run` with a worker on this host: a real model whose key this shell lacks. Only a note: the worker, which
    holds the key, may have been started with it in another shell."""
    from reposwarm.cli.common import prog

    missing = sorted({KEYS[p][0] for m in models if (p := provider_of(m)) in KEYS
                      and not is_set(KEYS[p][0]) and not is_set(KEYS[p][1])})
    if not missing:
        return None
    return (f"note: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set in this shell: the worker "
            f"that runs this needs it in its own environment (`{prog()} doctor --model M` on its host checks)")


def refuse_worker(serve: str) -> list[str]:
    """`worker`: the platform where it runs checks (not an orchestration-only worker: --serve workflows), and a
    key for REPOSWARM_MODEL when that is a real provider's model; returns the warnings to log (the sandbox off,
    no model credential at all)."""
    checks_here = serve != "workflows"
    findings = platform_findings(checks_here=checks_here)
    model = os.environ.get("REPOSWARM_MODEL", "").strip()
    if checks_here:
        findings += [check_credential(model)] if model and provider_of(model) in KEYS else \
            [f for f in credential_findings([]) if f.level != "ok"]
    return [f"{f.what}: {f.detail} ({f.fix})" if f.fix else f"{f.what}: {f.detail}" for f in refuse(findings)
            if f.what != "sandbox"]  # (the sandbox's warning the worker says itself, as every check does)

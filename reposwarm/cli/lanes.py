"""`reposwarm lanes --repo R [--out FILE] [--max-lanes N] [--rev REV]`: a starting lanes file from the repository's
structure alone (reposwarm/intel/layout.py: packages, CODEOWNERS, the import graph, the detected checks), no
model and no task, with a comment header saying how each part was derived. Reads the committed tree at REV, never
the working tree; the same tree gives the same file, byte for byte. The file is checked as `run` would check it
(reposwarm/lanes/checking.py) before it is written: a problem is an error, and nothing is written."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from reposwarm.cli.common import UserError, check_repo


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def cmd_lanes(args: argparse.Namespace) -> int:
    from reposwarm.contracts.proposal import DEFAULT_MAX_LANES
    from reposwarm.intel import lanesplit, layout
    from reposwarm.lanes.checking import check_lanes

    repo = check_repo(args.repo)
    max_lanes = DEFAULT_MAX_LANES if args.max_lanes is None else args.max_lanes
    if max_lanes < 1:
        raise UserError(f"--max-lanes must be at least 1, got {max_lanes}")
    progress = _say if sys.stderr.isatty() else None
    try:
        found = layout.survey(repo, args.rev, progress=progress)
    except layout.LayoutError as err:
        raise UserError(f"--rev: {err}") from None
    config, notes = lanesplit.plan(found, max_lanes)
    text = layout.lanes_yaml(found, config, notes)
    files = layout.tree_entries(repo, args.rev)
    findings = check_lanes(config, [path for path, _, _ in files], max_lanes=max_lanes, root=repo,
                           at=f" at {args.rev}")
    if findings.errors:  # (the structure's own lanes are disjoint by construction: this is a bug to report)
        raise UserError("the lanes made from the structure do not pass the lanes file's checks:\n  "
                        + "\n  ".join(findings.errors))
    for warning in findings.warnings:
        _say(f"warning: {warning}")
    if args.out in (None, "-"):
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    if out.is_dir():
        raise UserError(f"--out {args.out}: is a folder; give a file's path (like reposwarm.yaml)")
    if not out.parent.is_dir():
        raise UserError(f"--out {args.out}: no such folder {out.parent}")
    # written whole or not at all: a half-written lanes file is worse than none
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, out)
    _say(f"wrote {out}: {len(config.swarm.lanes)} lane(s) from {len(found.packages)} package(s) of {found.files:,} "
         f"files (edit it, then `reposwarm run --repo {repo} --lanes {out} --task ...`)")
    return 0

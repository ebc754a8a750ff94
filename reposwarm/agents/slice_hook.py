"""The lane's slice, enforced by the agent CLI itself before a write: a PreToolUse hook both CLIs run (Claude Code
from our --settings, Codex from the hooks.json in its CODEX_HOME), in the same sandbox as the agent.

The hook reads the tool call the CLI is about to make (JSON on stdin) and denies a file write outside the
session's writable paths, with the reason the agent is told. It judges the tools that name their files: Claude
Code's Write, Edit, MultiEdit and NotebookEdit, and Codex's apply_patch (the files its patch adds, updates,
deletes or moves to). A shell command names no files it could be judged by: what one writes outside the slice is
found and reverted at the lane's checkpoint, as with the built-in agent's `run` tool. Paths are resolved
(symlinks included) before they are judged; input the hook cannot read is denied, never let through.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

# Run as: python -I -S -c HOOK <root> <writable paths as JSON>. Deny: a JSON decision on stdout, exit 0.
HOOK = r"""
import json, os, re, sys
root, writable = sys.argv[1], json.loads(sys.argv[2])
def deny(why):
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                             "permissionDecisionReason": why}}))
    sys.exit(0)
try:
    event = json.loads(sys.stdin.read())
    tool, given = event.get("tool_name") or "", event.get("tool_input") or {}
    cwd = event.get("cwd") or root
except (ValueError, AttributeError):
    deny("reposwarm could not read this tool call, so it is not made")
paths = []
if tool in ("Write", "Edit", "MultiEdit", "NotebookEdit"):
    paths = [given.get("file_path") or given.get("notebook_path") or ""]
elif tool == "apply_patch":
    text = given.get("command") or given.get("input") or ""
    paths = re.findall(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.+?)\s*$", str(text), re.M)
    if not paths:
        deny("reposwarm found no file in this patch, so it is not applied")
else:
    sys.exit(0)
top = os.path.realpath(root)
allowed = [os.path.realpath(os.path.join(top, w)) for w in writable]
for path in paths:
    if not isinstance(path, str) or not path:
        deny("reposwarm could not tell which file this writes, so it is not made")
    full = os.path.realpath(os.path.join(cwd, path))
    if not any(full == a or full.startswith(a.rstrip("/") + "/") for a in allowed):
        shown = os.path.relpath(full, top) if full.startswith(top + "/") else full
        deny(f"{shown} is outside this lane's slice: it may write only {', '.join(writable)}")
sys.exit(0)
"""

# The tools the hook is asked about (the rest it is never shown): each CLI's file-writing tools.
CLAUDE_MATCHER = "Write|Edit|MultiEdit|NotebookEdit"
CODEX_MATCHER = "apply_patch"


def command(root: Path, writable: tuple[str, ...]) -> str:
    """The hook's shell command: the worker's Python (bound read-only in the sandbox), isolated from its site."""
    return " ".join(shlex.quote(part) for part in
                    [sys.executable, "-I", "-S", "-c", HOOK, str(root), json.dumps(list(writable))])


def hooks(root: Path, writable: tuple[str, ...], matcher: str) -> dict[str, object]:
    """The `hooks` entry both CLIs read (Claude Code's settings shape, which Codex's hooks.json shares)."""
    return {"PreToolUse": [{"matcher": matcher, "hooks": [{"type": "command", "command": command(root, writable),
                                                            "timeout": 30}]}]}

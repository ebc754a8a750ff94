#!/usr/bin/env python3
"""Check the demo's replay script without a swarm: apply it, then run the tests.

Copies repo/ to a temporary directory, applies each lane's write_file,
edit_file and delete_file calls (lanes in the order given, default
db_migration, api_layer, client, test_author), then runs lanes.yaml's
validation commands there. On the way it checks what the swarm would enforce:
tool names and arguments (every tool a lane has, as reposwarm.agent.specs
defines them: run and run_checks calls are checked, not run), unique call ids,
a finish call ending every lane, recorded usage within each lane's
token_budget, every read_file inside the lane's allowed or read-only paths,
every write inside its allowed_paths and outside its read_only_paths, and each
edit_file `old` string occurring exactly once when it is applied. Exits
non-zero on any failure. Run it with an interpreter that has reposwarm
installed (in a checkout, .venv/bin/python):

    python -m reposwarm.demo.verify_replay
    python -m reposwarm.demo.verify_replay --lanes db_migration,api_layer,client
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from pydantic import ValidationError

from reposwarm.agent.specs import TOOL_ARGS  # the lanes' tools: their names and arguments, as models are offered them

HERE = Path(__file__).resolve().parent
DEFAULT_ORDER = ["db_migration", "api_layer", "client", "test_author"]
WRITES = {"write_file", "edit_file", "delete_file"}


class ReplayError(Exception):
    pass


def pattern_regex(pattern):
    """A regex for a gitignore-style path pattern, anchored at the repository root.

    A trailing "/" covers everything under that folder, "**" spans folders,
    "*" and "?" stay within one path segment.
    """
    is_dir = pattern.endswith("/")
    body = pattern.strip("/")
    out = ""
    i = 0
    while i < len(body):
        if body.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif body.startswith("**", i):
            out += ".*"
            i += 2
        elif body[i] == "*":
            out += "[^/]*"
            i += 1
        elif body[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(body[i])
            i += 1
    out += "/.+" if is_dir else "(?:/.+)?"
    return re.compile(out + r"\Z")


def path_allowed(path, patterns):
    return any(pattern_regex(p).match(path) for p in patterns)


def check_path(path):
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path:
        raise ReplayError(f"bad path {path!r}: use a relative path with forward slashes")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise ReplayError(f"bad path {path!r}")


def check_script(replay, lanes_cfg):
    """Static checks over the whole replay file; returns {lane: [turns]} for round 1."""
    if replay.get("version") != 1:
        raise ReplayError("replay.yaml: version must be 1")
    seen_ids = set()
    scripts = {}
    for lane, rounds in (replay.get("lanes") or {}).items():
        if lane not in lanes_cfg:
            raise ReplayError(f"replay.yaml: lane {lane!r} is not in lanes.yaml")
        for rnd, turns in rounds.items():
            if not isinstance(rnd, int) or not turns:
                raise ReplayError(f"{lane}: rounds are keyed by number and hold a list of turns")
            for t, turn in enumerate(turns, 1):
                calls = turn.get("tool_calls") or []
                if not calls:
                    raise ReplayError(f"{lane} round {rnd} turn {t}: no tool calls")
                for call in calls:
                    cid, name, args = call.get("id"), call.get("name"), call.get("arguments") or {}
                    where = f"{lane} round {rnd} turn {t} call {cid}"
                    if not cid or cid in seen_ids:
                        raise ReplayError(f"{where}: missing or duplicate id")
                    seen_ids.add(cid)
                    if name not in TOOL_ARGS:
                        raise ReplayError(f"{where}: unknown tool {name!r} (the tools: {', '.join(TOOL_ARGS)})")
                    try:
                        TOOL_ARGS[name].model_validate(args)
                    except ValidationError as bad:
                        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or name}: {e['msg']}" for e in bad.errors())
                        raise ReplayError(f"{where}: {name}'s arguments: {problems}") from None
                    if name in WRITES and len(args.get("reason", "")) < 12:
                        raise ReplayError(f"{where}: reason must be at least 12 characters")
                    if name == "finish" and not all(isinstance(a, str) for a in args.get("assumptions", [])):
                        raise ReplayError(f"{where}: assumptions must be a list of strings")
            last = turns[-1]["tool_calls"][-1]
            if last["name"] != "finish" or any(
                c["name"] == "finish" for turn in turns for c in turn["tool_calls"] if c is not last
            ):
                raise ReplayError(f"{lane} round {rnd}: must end with exactly one finish call")
        scripts[lane] = rounds.get(1, [])
    return scripts


def apply_lane(root, lane, turns, role):
    """Apply one lane's file edits in order; return the number of tool calls."""
    allowed, read_only = role["allowed_paths"], role.get("read_only_paths", [])
    count = 0
    for turn in turns:
        for call in turn["tool_calls"]:
            count += 1
            name, args = call["name"], call.get("arguments") or {}
            if name == "read_file":
                check_path(args["path"])
                if not path_allowed(args["path"], allowed + read_only):
                    raise ReplayError(f"{lane} {call['id']} read_file {args['path']}: not readable by this lane")
                if not (root / args["path"]).is_file():
                    raise ReplayError(f"{lane} {call['id']} read_file {args['path']}: no such file at this point")
            if name not in WRITES:
                continue
            path = args["path"]
            check_path(path)
            where = f"{lane} {call['id']} {name} {path}"
            if not path_allowed(path, allowed):
                raise ReplayError(f"{where}: outside allowed_paths {allowed}")
            if path_allowed(path, read_only):
                raise ReplayError(f"{where}: inside read_only_paths {read_only}")
            target = root / path
            if name == "write_file":
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(args["content"], encoding="utf-8")
            elif name == "delete_file":
                if not target.is_file():
                    raise ReplayError(f"{where}: no such file")
                target.unlink()
            else:
                if not target.is_file():
                    raise ReplayError(f"{where}: no such file")
                text = target.read_text(encoding="utf-8")
                found = text.count(args["old"])
                if found != 1:
                    raise ReplayError(f"{where}: `old` occurs {found} times (must be exactly once)")
                target.write_text(text.replace(args["old"], args["new"], 1), encoding="utf-8")
            print(f"  {call['id']:<12} {name:<11} {path}")
    return count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", default=",".join(DEFAULT_ORDER), help="comma-separated lanes to apply, in order")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy and print its path")
    opts = parser.parse_args()

    config = yaml.safe_load((HERE / "lanes.yaml").read_text(encoding="utf-8"))
    replay = yaml.safe_load((HERE / "replay.yaml").read_text(encoding="utf-8"))
    lanes_cfg = config["swarm"]["lanes"]
    profile = config["validation"]["profiles"][config["validation"]["profile"]]

    tmp = Path(tempfile.mkdtemp(prefix="reposwarm-demo-"))
    root = tmp / "repo"
    failed = False
    try:
        scripts = check_script(replay, lanes_cfg)
        print(f"replay.yaml: {sum(len(t['tool_calls']) for s in scripts.values() for t in s)} tool calls, ids unique, every lane ends with finish")
        shutil.copytree(HERE / "repo", root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "node_modules"))
        for lane in [name for name in opts.lanes.split(",") if name]:
            if lane not in scripts:
                raise ReplayError(f"no replay script for lane {lane!r}")
            print(f"{lane}:")
            count = apply_lane(root, lane, scripts[lane], lanes_cfg[lane])
            used = sum(sum((t.get("usage") or {}).values()) for t in scripts[lane])
            budget = lanes_cfg[lane].get("token_budget", 64000)
            if used > budget:
                raise ReplayError(f"{lane}: the script's usage ({used} tokens) is over its token_budget ({budget})")
            print(f"  ({len(scripts[lane])} turns, {count} tool calls, {used} of {budget} tokens)")

        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        for argv in profile["commands"]:
            proc = subprocess.run(
                argv, cwd=root, env=env, capture_output=True, text=True, timeout=profile.get("timeout_s", 300)
            )
            tail = (proc.stdout + proc.stderr).strip().splitlines()
            if proc.returncode == 0:
                ran = next((line.strip("# ") for line in tail if line.startswith(("Ran ", "# tests "))), "")
                print(f"PASS  {' '.join(argv)}  [{ran}]")
            else:
                failed = True
                print(f"FAIL  {' '.join(argv)}  (exit {proc.returncode})")
                print("\n".join("      " + line for line in tail[-40:]))
    except (ReplayError, OSError, KeyError, subprocess.TimeoutExpired) as err:
        print(f"ERROR: {err}")
        failed = True
    finally:
        if opts.keep:
            print(f"kept: {root}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    print("FAILED" if failed else "OK: replay applies cleanly and all validation commands pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

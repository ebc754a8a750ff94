"""The harness of real repositories (bench/realrepos.py), its setting up: the user's checkout at the commit's
parent, the user's environment made there as the entry says (cached), and the break probe commit."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROBE_TEXT = "reposwarm break probe"
TOOLS = {"uv": ["python3 -m venv \"$TOOLS/uv\"", "\"$TOOLS/uv/bin/pip\" install -q uv"]}


# --- the checkout and the user's environment ---

def git(repo: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {repo}: {done.stderr.strip()[:500]}")
    return done.stdout.strip()


def source_of(entry: dict[str, Any], mirrors: Path | None) -> str:
    owner, name = entry["repo"].removeprefix("github:").split("/")
    if mirrors is not None:
        for candidate in (mirrors / f"{owner}+{name}" / "repo", mirrors / owner / name, mirrors / owner / f"{name}.git"):
            if candidate.is_dir():
                return str(candidate)
    return f"https://github.com/{owner}/{name}.git"


def make_checkout(entry: dict[str, Any], folder: Path, source: str) -> tuple[Path, str]:
    """The user's checkout: branch main at the commit's parent, clean (what setup made, ignored, is kept)."""
    checkout = folder / entry["repo"].rsplit("/", 1)[1]  # named as a user's clone is (runs and try folders say it)
    sha = entry["commit"]
    if not (checkout / ".git").is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "-q", "--no-checkout", source, str(checkout)], check=True)
    if git(checkout, "cat-file", "-t", sha, check=False) != "commit":
        git(checkout, "fetch", "-q", "origin")
    parent = git(checkout, "rev-parse", f"{sha}^")
    git(checkout, "checkout", "-q", "-f", "-B", "main", parent)
    git(checkout, "reset", "-q", "--hard", parent)  # (a setup that rewrote a tracked file: back as committed)
    return checkout, parent


def venv_of(folder: Path) -> Path:
    return folder / "venv"


def tools_dir(work: Path) -> Path:
    return work / "tools"


def base_env() -> dict[str, str]:
    """This process's environment as a user's shell would have it: no reposwarm venv on PATH, no lanes-file knobs,
    no venv of ours active."""
    sys.path.insert(0, str(ROOT))
    from reposwarm.lanes.loading import ENV_KNOBS

    env = {k: v for k, v in os.environ.items() if k not in ENV_KNOBS and not k.startswith(("REPOSWARM_", "TEMPORAL_"))}
    env.pop("VIRTUAL_ENV", None)
    ours = str(ROOT / ".venv" / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != ours)
    return env


def ensure_tools(names: list[str], work: Path, log: Path) -> None:
    for name in names:
        marker = tools_dir(work) / f".{name}.done"
        if marker.is_file():
            continue
        tools_dir(work).mkdir(parents=True, exist_ok=True)
        run_setup(TOOLS[name], work, {**base_env(), "TOOLS": str(tools_dir(work))}, log)
        marker.write_text("done\n")


def run_setup(commands: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
    with log.open("a") as out:
        for command in commands:
            out.write(f"$ {command}\n")
            out.flush()
            done = subprocess.run(["bash", "-e", "-c", command], cwd=cwd, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=1800)
            if done.returncode != 0:
                raise RuntimeError(f"setup command failed (exit {done.returncode}): {command} (log {log})")


def user_env(entry: dict[str, Any], folder: Path, checkout: Path, work: Path) -> dict[str, str]:
    """The entry's environment, made once (again when its commands change) and active as `activate` makes it."""
    spec = entry["environment"]
    venv, tools = venv_of(folder), tools_dir(work)
    env = {**base_env(), "VENV": str(venv), "TOOLS": str(tools)}
    log = folder / "setup.log"
    ensure_tools(list(spec.get("tools") or []), work, log)
    for tool in spec.get("tools") or []:
        env["PATH"] = f"{tools / tool / 'bin'}{os.pathsep}{env['PATH']}"
    marker = folder / "env.done"
    digest = hashlib.sha256(json.dumps([spec, entry["commit"]]).encode()).hexdigest()
    if not (marker.is_file() and marker.read_text().strip() == digest):
        marker.unlink(missing_ok=True)
        log.write_text("")
        if venv.exists():
            shutil.rmtree(venv)
        run_setup(list(spec["setup"]), checkout, env, log)
        git(checkout, "reset", "-q", "--hard")  # an install may touch a tracked file; the user's tree stays as committed
        marker.write_text(digest + "\n")
    activate = spec["activate"]
    if activate != "none":
        where = Path(activate.replace("$VENV", str(venv)))
        where = where if where.is_absolute() else checkout / where
        env["VIRTUAL_ENV"] = str(where)
        env["PATH"] = f"{where / 'bin'}{os.pathsep}{env['PATH']}"
    for key in ("VENV", "TOOLS"):
        env.pop(key)
    return env


# --- the break probe ---

def probe_line(language: str, text: str) -> int:
    """Where the probe goes (1-based: before this line; 0: at the end): Python after the docstring and any
    __future__ import; JavaScript at the top (after a #! line); Go and Rust at the end."""
    if language in ("go", "rust"):
        return 0
    lines = text.splitlines()
    if language == "javascript":
        return 2 if lines and lines[0].startswith("#!") else 1
    try:
        body = ast.parse(text).body
    except SyntaxError:
        return 1
    after = 0
    for node in body:
        is_doc = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        if (is_doc and after == 0) or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            after = node.end_lineno or after
        else:
            break
    return after + 1


def probe_statement(language: str) -> str:
    return {"python": f'raise ImportError("{PROBE_TEXT}")',
            "javascript": f'throw new Error("{PROBE_TEXT}");',
            "go": f'func init() {{ panic("{PROBE_TEXT}") }}',
            "rust": f'compile_error!("{PROBE_TEXT}");'}[language]


def with_probe(text: str, line: int, statement: str) -> str:
    lines = text.splitlines(keepends=True)
    if line == 0:
        return text + ("" if text.endswith("\n") or not text else "\n") + statement + "\n"
    lines.insert(line - 1, statement + "\n")
    return "".join(lines)


def make_probe(entry: dict[str, Any], checkout: Path, parent: str) -> str:
    """The probe commit: the real commit's tree plus the probe line, on top of the parent, on its own branch."""
    sha, path = entry["commit"], entry["probe"]["file"]
    if path not in git(checkout, "diff", "--name-only", parent, sha).splitlines():
        raise RuntimeError(f"the probe's file {path} is not changed by the commit")
    text = git(checkout, "show", f"{sha}:{path}") + "\n"
    changed = with_probe(text, entry["probe"]["line"], probe_statement(entry["language"]))
    index = checkout / ".git" / "realrepos-probe.index"
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}

    def plumb(*args: str, stdin: str | None = None) -> str:
        return subprocess.run(["git", "-C", str(checkout), *args], env=env, input=stdin, capture_output=True,
                              text=True, check=True).stdout.strip()

    blob = plumb("hash-object", "-w", "--stdin", stdin=changed)
    plumb("read-tree", sha)
    mode = plumb("ls-files", "-s", "--", path).split()[0]
    plumb("update-index", "--cacheinfo", f"{mode},{blob},{path}")
    tree = plumb("write-tree")
    index.unlink(missing_ok=True)
    message = git(checkout, "log", "-1", "--format=%B", sha) + f"\n\n(break probe: {path} raises at import)\n"
    probe = subprocess.run(["git", "-C", str(checkout), "commit-tree", tree, "-p", parent], input=message,
                           capture_output=True, text=True, check=True,
                           env={**os.environ, "GIT_AUTHOR_NAME": "realrepos", "GIT_AUTHOR_EMAIL": "realrepos@localhost",
                                "GIT_COMMITTER_NAME": "realrepos", "GIT_COMMITTER_EMAIL": "realrepos@localhost"}
                           ).stdout.strip()
    git(checkout, "branch", "-f", f"realrepos-probe/{entry['name']}", probe)
    return probe

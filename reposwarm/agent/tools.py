"""The helper's tool surface (DESIGN.md section 5), over one folder and one path policy.

Names and arguments are a public interface, shared by the lanes (through the
run_tool activity) and by any agent (through the MCP server). Every path goes
through the one PathPolicy; a refusal raises ToolRefused, whose message is
what the caller shows the model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from reposwarm.agent import checking as lane_checks
from reposwarm.agent import shell as lane_shell
from reposwarm.agent.specs import (
    FINISH,
    TOOL_ARGS,
    DeleteFileArgs,
    EditFileArgs,
    ListDirArgs,
    ReadFileArgs,
    RunArgs,
    RunChecksArgs,
    SearchArgs,
    SymbolLookupArgs,
    WriteFileArgs,
    parse_args,
)
from reposwarm.contracts import CheckProfile, FileEdit, TestReport
from reposwarm.runs.store import Store
from reposwarm.runs.store import home as reposwarm_home
from reposwarm.slices.leftovers import revert_outside_slice
from reposwarm.slices.policy import PathPolicy, ToolRefused
from reposwarm.vcs import gitcmd

OUTPUT_CAP = 20_000
MAX_MATCHES = 200
PREVIEW_CHARS = 300


def _cap(text: str) -> str:
    if len(text) <= OUTPUT_CAP:
        return text
    return text[:OUTPUT_CAP] + f"\n[... {len(text) - OUTPUT_CAP} more characters cut; narrow the request]"


def _grep(policy: PathPolicy, argv: list[str], paths: list[str]) -> list[str]:
    status, out, _ = gitcmd.try_git(gitcmd.repo(policy.root), "grep", "--untracked", "-n", "-I", *argv, "--", *paths)
    if status not in (0, 1):
        raise ValueError(f"search failed: {out.strip()[:300] or 'bad pattern'}")
    hits = [line for line in out.splitlines() if policy.readable(line.split(":", 1)[0])]
    return hits


class Toolbox:
    """The tools over one folder (a lane's worktree, or the repository an MCP server was given)."""

    def __init__(self, policy: PathPolicy, *, store: Store | None = None,
                 check_profiles: dict[str, CheckProfile] | None = None, default_profile: str = "default",
                 default_reason: str = "", baseline: Callable[[], TestReport | None] | None = None,
                 shell: bool | None = False) -> None:
        self.policy = policy
        self.shell = shell  # the `run` tool: on, off, or None (on when the sandbox is); off unless asked for
        self.ran: lane_shell.Ran | None = None  # what the last call ran, if it was a `run`
        self.edits: list[FileEdit] = []  # the files the last `run` changed inside the slice
        self.store = store
        self.check_profiles = check_profiles or {}
        self.default_profile = default_profile
        self.default_reason = default_reason
        self.baseline = baseline  # the run's report on the base commit, once it is in (a lane's run_checks)
        self.edit: FileEdit | None = None  # the edit the last call made, if any
        self.undone: list[str] = []  # what the last run_checks left outside the slice, undone (for the ledger)

    def call(self, name: str, arguments: dict[str, Any] | None, raw: str = "") -> str:
        """Run one tool by name; raises ToolRefused, or ValueError/OSError for a failed call."""
        if name not in TOOL_ARGS:
            raise ToolRefused(f"unknown tool {name!r}; the tools are: {', '.join(TOOL_ARGS)}")
        args = parse_args(name, arguments, raw)
        if name == FINISH:
            raise ValueError("finish ends a lane; it is not run as a tool")
        self.edit, self.edits, self.ran = None, [], None
        return getattr(self, name)(args)

    def _ref(self, data: bytes | str) -> str | None:
        return self.store.put(data) if self.store is not None else None

    def _reason(self, given: str | None, fallback: str) -> str:
        reason = (given or "").strip() or self.default_reason.strip() or fallback
        return reason if len(reason) >= 12 else f"{reason} ({fallback})"

    def read_file(self, a: ReadFileArgs) -> str:
        rel, real = self.policy.for_read(a.path)
        if real.is_file():
            text = real.read_text(encoding="utf-8", errors="replace")
        else:
            text = self._from_git(rel)  # outside a sparse checkout, the file is still in git's objects
        lines = text.splitlines(keepends=True)
        start = (a.start_line or 1) - 1
        end = a.end_line or len(lines)
        body = "".join(lines[start:end])
        return _cap(f"{rel} (lines {start + 1}-{min(end, len(lines))} of {len(lines)})\n{body}")

    def _from_git(self, rel: str) -> str:
        text = gitcmd.show(gitcmd.repo(self.policy.root), "HEAD", rel)
        if text is None:
            raise ValueError(f"{rel}: no such file")
        return text

    def list_dir(self, a: ListDirArgs) -> str:
        rel, real = self.policy.for_list(a.path)
        if not real.is_dir():
            raise ValueError(f"{rel or '.'}: not a folder")
        entries = []
        for child in sorted(real.iterdir()):
            child_rel = f"{rel}/{child.name}" if rel else child.name
            if child.name == ".git":
                continue
            if child.is_dir():
                entries.append(child.name + "/")
            elif self.policy.readable(child_rel):
                entries.append(child.name)
        return _cap("\n".join(entries) or "(empty, or nothing readable for this lane)")

    def search(self, a: SearchArgs) -> str:
        paths = [self.policy.for_list(p)[0] or "." for p in (a.paths or ["."])]
        hits = _grep(self.policy, ["-E", "-e", a.pattern], paths)
        more = f"\n[{len(hits) - MAX_MATCHES} more matches]" if len(hits) > MAX_MATCHES else ""
        return _cap("\n".join(hits[:MAX_MATCHES]) + more) if hits else "no matches"

    def symbol_lookup(self, a: SymbolLookupArgs) -> str:
        """Definitions, then references: from the symbol index of the worktree's HEAD (checkpointed after
        every turn) for the languages it parses, and from git grep for every other file."""
        import sqlite3
        from concurrent.futures import ThreadPoolExecutor

        from temporalio import activity

        from reposwarm.symbols.index import SymbolIndex, SymbolIndexError, indexed_globs

        def heartbeat(message: str) -> None:  # a first index of a large repository takes a while
            if activity.in_activity():
                activity.heartbeat(message)

        # the grep finder: the whole answer before the index, now for the files the index does not parse
        name = re.escape(a.symbol.split(".")[-1])
        kinds = r"(def|class|function|func|fn|const|let|var|type|interface|struct|enum|trait|impl)"
        greps = [["-E", "-e", rf"(^|[^A-Za-z0-9_]){kinds}[[:space:]]+\*?{name}([^A-Za-z0-9_$]|$)"],
                 ["-w", "-e", a.symbol.split(".")[-1]]]
        others = [".", *(f":(exclude){glob}" for glob in indexed_globs())]
        indexed_defs: list[str] = []
        indexed_refs: list[str] = []
        more_defs = more_refs = 0
        with ThreadPoolExecutor(2) as pool:  # the greps run while the index answers
            grepped = [pool.submit(_grep, self.policy, argv, others) for argv in greps]
            try:
                with SymbolIndex(self.policy.root) as index:
                    found = index.lookup(a.symbol, rev="HEAD", limit=50, readable=self.policy.readable,
                                         progress=heartbeat)
                indexed_defs = [f"{d.path}:{d.line}: {d.kind} {d.name}" + (f" (in {d.scope})" if d.scope else "")
                                for d in found.definitions]
                indexed_refs = [f"{r.path}:{r.line}" for r in found.references]
                more_defs, more_refs = found.more_definitions, found.more_references
                definitions, references = (future.result() for future in grepped)
            except (SymbolIndexError, sqlite3.Error, ImportError, OSError):
                # no index (no commit yet, no grammar): grep everything, as before
                definitions, references = (_grep(self.policy, argv, ["."]) for argv in greps)
        references = [h for h in references if h not in definitions]
        definitions = indexed_defs + definitions[:50]
        references = indexed_refs + references[:MAX_MATCHES - len(indexed_refs)]
        out = ["definitions:", *(definitions or ["(none found)"])]
        if more_defs:
            out.append(f"[{more_defs} more definitions; a qualified symbol (Class.method) ranks that scope first]")
        out += ["references:", *(references or ["(none found)"])]
        if more_refs:
            out.append(f"[{more_refs} more references]")
        return _cap("\n".join(out))

    def write_file(self, a: WriteFileArgs) -> str:
        data = a.content.encode("utf-8")
        rel, real = self.policy.for_write(a.path, size=len(data))
        if real.is_dir():
            raise ValueError(f"{rel} is a folder")
        existed = real.exists()
        real.parent.mkdir(parents=True, exist_ok=True)
        real.write_bytes(data)
        self.edit = FileEdit(path=rel, operation="modify" if existed else "create",
                             reason=self._reason(a.reason, f"write_file {rel}"), content_ref=self._ref(data))
        return f"wrote {rel} ({len(data)} bytes)"

    def edit_file(self, a: EditFileArgs) -> str:
        rel, real = self.policy.for_write(a.path)
        if not real.is_file():
            raise ValueError(f"{rel}: no such file")
        text = real.read_text(encoding="utf-8")
        count = text.count(a.old)
        if count != 1:
            raise ValueError(f"{rel}: `old` occurs {count} times; it must occur exactly once (give more context)")
        new_text = text.replace(a.old, a.new, 1)
        rel, real = self.policy.for_write(a.path, size=len(new_text.encode("utf-8")))
        real.write_text(new_text, encoding="utf-8")
        self.edit = FileEdit(path=rel, operation="modify", reason=self._reason(a.reason, f"edit_file {rel}"),
                             content_ref=self._ref(new_text))
        return f"edited {rel}: replaced 1 occurrence"

    def delete_file(self, a: DeleteFileArgs) -> str:
        rel, real = self.policy.for_write(a.path)
        if not real.is_file() and not real.is_symlink():
            raise ValueError(f"{rel}: no such file")
        real.unlink()
        self.edit = FileEdit(path=rel, operation="delete", reason=self._reason(a.reason, f"delete_file {rel}"))
        return f"deleted {rel}"

    def run_checks(self, a: RunChecksArgs) -> str:
        name = a.profile or self.default_profile
        profile = self.check_profiles.get(name)
        if profile is None:
            configured = ", ".join(sorted(self.check_profiles)) or "none"
            raise ToolRefused(f"run_checks runs only configured check profiles; {name!r} is not one "
                              f"(configured: {configured})")
        baseline = self.baseline() if self.baseline is not None else None
        said = lane_checks.run(a, profile, name, self.policy, self.store, baseline,
                               waiting=baseline is None and self.baseline is not None)
        text = _cap(said)
        undone = self.undone = self._contain_checks()
        if undone:  # (after the cap, which must not cut it)
            more = f"; and {len(undone) - 20} more" if len(undone) > 20 else ""
            text += ("\nrefused: the checks changed paths outside this lane's slice; reverted: "
                     + "; ".join(undone[:20]) + more)
        return text

    def run(self, a: RunArgs) -> str:
        """One command in the checks' sandbox, contained as run_checks is (reposwarm/agent/shell.py)."""
        if not lane_shell.enabled(self.shell):
            raise ToolRefused(lane_shell.OFF)
        ran = self.ran = lane_shell.run(
            a, self.policy, lane_shell.profile_for(self.check_profiles, self.default_profile), store=self.store,
            scope=f"lane:{self.store.run_id}/{self.policy.root.name}" if self.store is not None else "",
            contain=self._contain_checks)
        self.edits, self.undone = ran.edits, ran.undone
        return ran.text

    def _contain_checks(self) -> list[str]:
        """Undo what the checks changed outside the lane's writable paths (the sandbox lets them write the whole
        worktree). Only in a worktree of the swarm's own (under REPOSWARM_HOME): over the user's checkout (the
        MCP server), the same would wipe their uncommitted work and ignored files."""
        if reposwarm_home() not in self.policy.root.parents:
            return []
        return revert_outside_slice(self.policy)

"""Whether a check ran the change's own code (issue 44), as the gate holds it: the merging of the parts' evidence
and the words every place that shows a verdict uses.

The evidence (`TestReport.exercise`, made by reposwarm/checks/evidence/ from what each command's processes loaded
and the files the lanes changed) sorts each changed source file: loaded from the tree, loaded from **outside** the
tree (an installed copy, an editable install of the user's checkout, a stale build: the passing tests say nothing
about the change, so the check is NOT JUDGED), or **not loaded** by any command ("not exercised by any check":
counted in the verdict line, and a failure of the gate where the profile says `require_exercised: true`).

A check that ran as several parts (shards, the selected tests and then the remainder) is judged on the parts'
evidence together (`merged`): a file loaded from the tree by any part was exercised; one loaded from outside by any
part stays outside (that part's tests ran another copy, whatever the others ran); one is not exercised only when no
command of any part could have run it unseen. No evidence (`exercise` None: no collector, or a report recorded
before) changes nothing. Pure functions: workflows call them.

Sorting one check's files (`exercise`):

Per changed source file (`language`; docs, data and configuration are left out, not counted):
- **outside** when any command loaded its module from elsewhere (that command's tests ran another copy of it,
  whatever the others ran);
- else **loaded** when any command loaded it from the tree;
- else **not loaded** when a runtime of its language gave evidence (Python, node, Go) and no command could have
  run it unseen;
- else **unknown**: its language gave no evidence (Rust crates whose tests did not run, Java, a command that
  started no traced process of it).

"Run it unseen": a command that gave no evidence of the file's language though it could have run it: a runner of
that language (pytest that ran with `python -I`, an environment that replaced PYTHONPATH, tox's own environment),
a command killed at a limit (its processes' records are lost), or a command of no known runner that gave no
evidence at all (`make test` with env -i) unless it is a static tool that runs no code (ruff, eslint, tsc...).
Such a command's files are unknown, never "not loaded": nothing says the file did not run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from reposwarm.contracts import CommandResult, Exercise, TestReport
from reposwarm.text import inert_line

# The fix for a change loaded from outside the tree, said with the NOT JUDGED reason wherever it is shown.
FIX = ("the tree's import roots were not first (an installed copy, an editable install or a stale build ran instead): "
       "put the tree first or remove that copy, see docs/checks.md")
NOT_EXERCISED = "not exercised by any check"
# The problem the profile's `require_exercised` makes of them (verdicts.required): its words start it, so it is
# added once.
REQUIRED = "changed source files not exercised by any check, and the profile says require_exercised: true"
SHOWN = 5  # files named in one line; the rest counted
PATH_CHARS = 200  # of one path or place named (both come from the tree and the runtimes: hostile input)


# --- sorting: each changed source file, from what one check's commands loaded ---

# The runtime that runs a source file, by its name's ending. Files of no language here (docs, data, configuration,
# stubs, type declarations) are left out of the evidence: no runtime "loads" a README, and counting them would
# make "3 of 5 changed source files exercised" say nothing.
LANGUAGES = {".py": "python", ".js": "node", ".mjs": "node", ".cjs": "node", ".jsx": "node", ".ts": "node",
             ".tsx": "node", ".mts": "node", ".cts": "node", ".go": "go", ".rs": "rust", ".java": "java",
             ".kt": "java"}
NOT_SOURCE = (".d.ts", ".d.mts", ".d.cts")
def language(path: str) -> str | None:
    """"python", "node", "go", "rust", "java", or None for a file no runtime here runs."""
    if path.endswith(NOT_SOURCE):
        return None
    return LANGUAGES.get(os.path.splitext(path)[1])


RUNNER_LANGUAGE = {"pytest": "python", "unittest": "python", "node": "node", "jest": "node", "vitest": "node",
                   "mocha": "node", "go": "go", "cargo": "rust"}
# Languages whose evidence can say a file was not loaded (Rust's can only say a crate's tests ran; Java has none).
JUDGED_LANGUAGES = ("python", "node", "go")
# Programs that read code and run none of it: a command of them with no evidence hides nothing.
STATIC_TOOLS = frozenset({"ruff", "mypy", "flake8", "pylint", "black", "isort", "pyright", "eslint", "prettier",
                          "tsc", "biome", "golangci-lint", "gofmt", "staticcheck", "shellcheck", "clippy-driver",
                          "rustfmt", "pre-commit", "codespell", "yamllint", "markdownlint", "stylelint"})
SHADOWED_MAX = 50


def sources(files: Iterable[str]) -> list[str]:
    """The changed files a runtime could speak for, in order, once each."""
    return sorted({f for f in files if language(f) is not None})


def _static(argv: Sequence[str]) -> bool:
    return any(os.path.basename(a).removesuffix(".js") in STATIC_TOOLS for a in argv[:4])


def _hides(result: CommandResult, lang: str) -> bool:
    """Whether `result`'s command may have run a file of `lang` with no evidence of it."""
    loaded = result.loaded
    languages = set(loaded.languages) if loaded is not None else set()
    if lang in languages and result.exit_code is not None:
        return False
    own = RUNNER_LANGUAGE.get(result.runner)
    if result.exit_code is None and (own is None or own == lang):
        return True  # killed at a limit: what its processes loaded before is lost
    if own is not None:
        return own == lang
    return not languages and not _static(result.argv)


def exercise(results: Sequence[CommandResult], changed: Iterable[str],
             changed_lines: Mapping[str, Sequence[int]] | None = None) -> Exercise:
    """The changed source files of `changed` sorted by what the commands loaded. `changed_lines`: file -> its
    changed (executable) lines, for diff coverage where a command measured them."""
    watched = sources(changed)
    given = [r.loaded for r in results if r.loaded is not None]
    outside: dict[str, str] = {}
    loaded, not_loaded, unknown = [], [], []
    evidenced = {lang for g in given for lang in g.languages}
    for path in watched:
        lang = language(path)
        where = next((g.outside[path] for g in given if path in g.outside), None)
        if where is not None:
            outside[path] = where
        elif any(path in g.inside for g in given):
            loaded.append(path)
        elif lang in JUDGED_LANGUAGES and lang in evidenced and not any(_hides(r, lang or "") for r in results):
            not_loaded.append(path)
        else:
            unknown.append(path)
    mine = set(watched)
    shadowed: dict[str, str] = {}
    for g in given:
        for path, where in g.outside.items():
            if path not in mine and len(shadowed) < SHADOWED_MAX:
                shadowed.setdefault(path, where)
    diff_lines: dict[str, tuple[int, int]] = {}
    for path in loaded:
        wanted = set((changed_lines or {}).get(path, ()))
        measured = [set(g.lines[path]) for g in given if path in g.lines]
        if wanted and measured:
            diff_lines[path] = (len(wanted & set().union(*measured)), len(wanted))
    return Exercise(loaded=loaded, outside=outside, not_loaded=not_loaded, unknown=unknown,
                    shadowed=dict(sorted(shadowed.items())), diff_lines=diff_lines)


# --- the gate: merged over a check's parts, and the words ---


def _path(text: str) -> str:
    return inert_line(text)[:PATH_CHARS]


def _named(files: list[str]) -> str:
    shown = ", ".join(f"`{_path(f)}`" for f in files[:SHOWN])
    return shown + (f" and {len(files) - SHOWN} more" if len(files) > SHOWN else "")


def merged(reports: Sequence[TestReport]) -> Exercise | None:
    """The parts' evidence as one check's: their commands sorted together, as one run of them all would be
    (`exercise`): outside anywhere stays outside, then loaded from the tree anywhere is exercised, and a
    file is "not loaded" only when no command of any part could have run it unseen (else unknown). Diff coverage:
    the most any part measured (parts count lines, they do not list them). None when no part had any evidence."""
    given = [r.exercise for r in reports if r.exercise is not None]
    if not given:
        return None
    if len(reports) == 1:
        return given[0]
    changed = {f for e in given for f in (*e.loaded, *e.outside, *e.not_loaded, *e.unknown)}
    together = exercise([c for r in reports for c in r.commands], changed)
    shadowed: dict[str, str] = {}
    diff_lines: dict[str, tuple[int, int]] = {}
    for e in given:
        for path, where in e.shadowed.items():
            if len(shadowed) < SHADOWED_MAX:
                shadowed.setdefault(path, where)
        for path, (ran, lines) in e.diff_lines.items():
            before = diff_lines.get(path, (0, 0))
            diff_lines[path] = (max(ran, before[0]), max(lines, before[1]))
    loaded = set(together.loaded)
    return together.model_copy(update={
        "shadowed": dict(sorted(shadowed.items())),
        "diff_lines": {path: counts for path, counts in sorted(diff_lines.items()) if path in loaded}})


def outside(report: TestReport) -> dict[str, str]:
    """The changed source files the check loaded from outside the tree (what makes it NOT JUDGED)."""
    return dict(report.exercise.outside) if report.exercise is not None else {}


def not_exercised(report: TestReport) -> list[str]:
    """The changed source files no command of the check loaded."""
    return list(report.exercise.not_loaded) if report.exercise is not None else []


def counted(report: TestReport, always: bool = False) -> str:
    """"3 of 5 changed source files exercised" (those the runtimes spoke for; loaded from outside is not
    exercised); "" with no evidence or no changed source file, and, unless `always`, when every one was exercised
    (the verdict line says the count where it tells something)."""
    ex = report.exercise
    if ex is None or not ex.counted or (not always and len(ex.loaded) == ex.counted):
        return ""
    noun = "file" if ex.counted == 1 else "files"
    return f"{len(ex.loaded)} of {ex.counted} changed source {noun} exercised"


def required_problem(report: TestReport) -> str:
    """The problem `require_exercised: true` makes of the changed source files no check loaded ("" for none)."""
    missing = not_exercised(report)
    if not missing:
        return ""
    return f"{REQUIRED}: {_named(missing)}: add or extend a test that loads them, or set require_exercised: false"


def outside_reason(report: TestReport) -> str:
    """Why a check whose changed modules were loaded from outside the tree judges nothing: which module, loaded from
    where, and the fix. "" when none was."""
    found = outside(report)
    if not found:
        return ""
    first, where = next(iter(found.items()))
    more = len(found) - 1
    also = f" (and {more} more changed file{'' if more == 1 else 's'} loaded from outside the tree)" if more else ""
    return f"`{_path(first)}` was loaded from {_path(where)}, not from the tree{also}: {FIX}"


def lines(report: TestReport) -> list[str]:
    """The evidence in plain lines, for status, a lane's run_checks and `reposwarm checks`: how many changed source
    files ran, what was loaded from outside the tree (each file, and where from), what no check loaded, diff
    coverage, unchanged files shadowed."""
    ex = report.exercise
    if ex is None:
        return []
    out = [counted(report, always=True)] if ex.counted else []
    out += [f"loaded from outside the tree (NOT JUDGED): `{_path(path)}` from {_path(where)}"
            for path, where in list(ex.outside.items())[:SHOWN * 2]]
    if len(ex.outside) > SHOWN * 2:
        out.append(f"... and {len(ex.outside) - SHOWN * 2} more changed files loaded from outside the tree")
    if ex.outside:
        out.append(f"fix: {FIX}")
    if ex.not_loaded:
        out.append(f"{NOT_EXERCISED}: {_named(ex.not_loaded)}")
    out += [f"diff coverage: `{_path(path)}`: {ran} of {changed} changed lines ran"
            for path, (ran, changed) in list(ex.diff_lines.items())[:SHOWN * 2]]
    if ex.shadowed:
        first, where = next(iter(ex.shadowed.items()))
        out.append(f"warning: {len(ex.shadowed)} unchanged tree file(s) were loaded from outside the tree too "
                   f"(`{_path(first)}` from {_path(where)})")
    return out


def of_files(report: TestReport, files: Iterable[str]) -> tuple[dict[str, str], list[str], dict[str, tuple[int, int]]]:
    """The evidence on some files (a lane's): those loaded from outside (and from where), those not exercised by
    any check, and their diff coverage where measured."""
    ex = report.exercise
    if ex is None:
        return {}, [], {}
    mine = set(files)
    return ({f: w for f, w in ex.outside.items() if f in mine}, [f for f in ex.not_loaded if f in mine],
            {f: c for f, c in ex.diff_lines.items() if f in mine})

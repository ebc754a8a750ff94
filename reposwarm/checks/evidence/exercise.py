"""Whether a check ran the change's own code: each changed source file sorted from what its commands loaded
(`CommandResult.loaded`). Pure: no I/O (a workflow may call it).

Per changed source file (files.py `language`; docs, data and configuration are left out, not counted):
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

from reposwarm.checks.evidence.files import language
from reposwarm.contracts import CommandResult, Exercise

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

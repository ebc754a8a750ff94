"""JavaScript checks as the real repositories showed them (issue 44's harness: ufo with pnpm and vitest, commander
with npm and jest): an affected selection hands a runner only the files it collects itself (jest's testMatch,
testRegex, testPathIgnorePatterns and roots; vitest's include and exclude, its `*.test-d.ts` only with
--typecheck), and runs the command whole where its rules cannot be read; jest's tests see the command line as the
profile wrote it, not reposwarm's reporting flags and selection (a test that parses process.argv exits jest
otherwise, and the check gives no per-test results); vitest writes no results cache into node_modules, which
checks bind read-only; a base commit's failure of the command itself is the targeted command's too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reposwarm.checks import runner, verdicts
from reposwarm.checks.runners import jscollect, jsglobs, prefixes, select
from reposwarm.checks.selection import plans
from reposwarm.contracts import CheckProfile, CommandResult, TestFailure, TestReport
from reposwarm.contracts.states import ExitClass
from tests.helpers import git, make_repo
from tests.test_caches import _sandboxed  # noqa: F401 (autouse: the test's own REPOSWARM_HOME, sandbox on)

NODE_MODULES = (Path(__file__).parent / "fixtures" / "node" / "node_modules").resolve()
HAS_NODE = shutil.which("node") is not None
HAS_JEST = HAS_NODE and (NODE_MODULES / ".bin" / "jest").exists()
HAS_VITEST = HAS_NODE and (NODE_MODULES / "vitest").is_dir()


def _plan(repo: Path, argv: list[str], changed: list[str]):
    head = git(repo, "rev-parse", "HEAD").strip()
    return plans.plan(repo, head, head, CheckProfile(commands=[argv]), "affected", lambda a: {}, changed=changed)


# --- jest: what it collects -----------------------------------------------------------------------------------------

COMMANDER = {  # commander.js's layout: a CommonJS lib, jest's tests, and an ESM smoke script beside them
    "package.json": json.dumps({"name": "c", "scripts": {"test": "jest", "test-esm": "node tests/esm-imports-test.mjs"}}),
    "jest.config.js": "const config = {\n  testEnvironment: 'node',\n  collectCoverage: true,\n  transform: {\n"
                      "    '^.+\\\\.tsx?$': ['ts-jest', { tsconfig: 'tsconfig.ts.json' }],\n  },\n"
                      "  testPathIgnorePatterns: ['/node_modules/', '/tests/fixtures/'],\n};\n\nmodule.exports = config;\n",
    "lib/option.js": "exports.Option = class {}\n",
    "lib/command.js": "const { Option } = require('./option.js');\nexports.Command = class { o = new Option() }\n",
    "tests/options.test.js": "const { Option } = require('../lib/option.js');\ntest('o', () => new Option());\n",
    "tests/command.test.js": "const { Command } = require('../lib/command.js');\ntest('c', () => new Command());\n",
    "tests/other.test.js": "test('x', () => {});\n",
    "tests/esm-imports-test.mjs": "import { Option } from '../lib/option.js';\nconsole.log(Option);\n",
    "tests/helpers.js": "exports.make = () => require('../lib/option.js');\n",
    "tests/fixtures/pm.test.js": "require('../../lib/option.js');\n",
}


def test_jest_is_handed_only_its_own_test_files_and_the_count_is_of_them(tmp_path):
    repo = make_repo(tmp_path / "repo", COMMANDER)
    plan = _plan(repo, ["npx", "jest"], ["lib/option.js"])
    assert [p.names for p in plan.parts] == [{"npx jest": ["tests/command.test.js", "tests/options.test.js"]}]
    # (not the ESM script, the helper, nor an ignored fixture: jest would not run them; 2 of its 3 tests)
    assert plan.parts[0].label == "affected: 2 of 3 JavaScript test files, from 1 changed file"
    # a lane naming a file jest does not collect is told so, never given jest a file it ignores
    picked = select.plan([["npx", "jest"]], ["tests/esm-imports-test.mjs", "tests/other.test.js"], repo)
    assert [t.argv for t in picked.targets] == [["npx", "jest", "--runTestsByPath", "tests/other.test.js"]]
    assert [n for n, _ in picked.unclaimed] == ["tests/esm-imports-test.mjs"]


def test_jest_s_test_match_from_its_config_or_package_json(tmp_path):
    immer = {  # immer's: testMatch under __tests__, any name, and the ts-jest preset
        "jest.config.js": 'module.exports = {\n\tpreset: "ts-jest/presets/js-with-ts",\n\ttestEnvironment: "node",\n'
                          '\ttestMatch: ["**/__tests__/**/*.[jt]s?(x)"]\n}\n',
        "package.json": "{}", "src/core.ts": "export const a = 1\n",
        "__tests__/base.js": "import {a} from '../src/core'\n", "__tests__/other.js": "",
        "__tests__/flow/types.js.flow": "",
        "src/core.test.ts": "import {a} from './core'\n"}
    repo = make_repo(tmp_path / "immer", immer)
    plan = _plan(repo, ["yarn", "jest"], ["src/core.ts"])
    assert [p.names for p in plan.parts] == [{"yarn jest": ["__tests__/base.js"]}]  # (not src/core.test.ts)
    view = prefixes.look(["yarn", "jest"], repo)
    assert jscollect.collection(view, repo).source == "jest.config.js"
    regex = make_repo(tmp_path / "regex", {
        "package.json": json.dumps({"jest": {"testRegex": "/spec/.*_spec\\.js$", "roots": ["<rootDir>/spec"]}}),
        "spec/a_spec.js": "", "spec/a.test.js": "", "other/b_spec.js": ""})
    matches = jscollect.collection(prefixes.look(["npx", "jest"], regex), regex).matches
    assert matches is not None and [p for p in ("spec/a_spec.js", "spec/a.test.js", "other/b_spec.js")
                                    if matches(p)] == ["spec/a_spec.js"]


@pytest.mark.parametrize("config, said", [
    ("const m = require('./base');\nmodule.exports = {...m, testMatch: ['**/*.t.js']}\n", "takes settings from"),
    ("module.exports = { testMatch: process.env.CI ? ['a'] : ['b'] }\n", "cannot read"),
    ("module.exports = { projects: ['<rootDir>/a', '<rootDir>/b'] }\n", "sets projects"),
    ("module.exports = { preset: 'jest-expo' }\n", "preset"),
    ("module.exports = { testRegex: '(a+)+$' }\n", "exponential"),
    ("module.exports = { testMatch: ['**/*a*a*a*a*a*a*b'] }\n", "wildcards"),
    ("module.exports = { testMatch: " + "[" * 20000 + "]" * 20000 + " }\n", "cannot read"),
])
def test_jest_rules_it_cannot_read_run_the_command_whole_and_say_why(tmp_path, config, said):
    repo = make_repo(tmp_path / "repo", {**COMMANDER, "jest.config.js": config})
    plan = _plan(repo, ["npx", "jest"], ["lib/option.js"])
    assert [p.whole for p in plan.parts] == [["npx jest"]]
    assert "which files it runs as tests is not known" in plan.fallback and said in plan.fallback, plan.fallback
    # a lane's named test is still given as named (jest checks it against its own rules)
    assert select.plan([["npx", "jest"]], ["tests/options.test.js"], repo).targets


def test_a_hostile_package_json_leaves_jest_s_rules_unread_never_a_crash(tmp_path):
    nested = '{"name": "c", "jest": ' + "[" * 100_000 + "]" * 100_000 + "}"
    repo = make_repo(tmp_path / "repo", {**{k: v for k, v in COMMANDER.items() if k != "jest.config.js"},
                                         "package.json": nested})
    rules = jscollect.collection(prefixes.look(["npx", "jest"], repo), repo)
    assert rules.matches is None and "package.json" in rules.why, rules.why
    assert [p.whole for p in _plan(repo, ["npx", "jest"], ["lib/option.js"]).parts] == [["npx jest"]]


# --- vitest: what it collects -------------------------------------------------------------------------------------

UFO = {  # ufo's: vitest's defaults, a type test beside the tests, no config file
    "package.json": json.dumps({"name": "ufo", "scripts": {"test": "pnpm lint && vitest run --typecheck"}}),
    "src/utils.ts": "export const join = (a: string, b: string) => a + b\n",
    "src/index.ts": "export * from './utils'\n",
    "test/join.test.ts": "import { join } from '../src'\n",
    "test/base.test.ts": "import { join } from '../src'\n",
    "test/types.test-d.ts": "import { join } from '../src'\n",
    "test/fixture.ts": "import { join } from '../src'\n",
}


def test_vitest_gets_its_type_tests_only_with_typecheck(tmp_path):
    repo = make_repo(tmp_path / "ufo", UFO)
    plan = _plan(repo, ["pnpm", "exec", "vitest", "run"], ["src/utils.ts", "test/base.test.ts"])
    # (both of its tests are affected, and the type test is none of its: the command runs as it is)
    assert plan.parts[0].whole == ["pnpm exec vitest run"] and not plan.parts[0].names
    typed = jscollect.collection(prefixes.look(["vitest", "run", "--typecheck"], repo), repo).matches
    assert typed is not None and typed("test/types.test-d.ts") and typed("test/base.test.ts")
    assert not typed("test/fixture.ts")
    only = _plan(repo, ["pnpm", "exec", "vitest", "run"], ["test/base.test.ts"])
    assert [p.names for p in only.parts] == [{"pnpm exec vitest run": ["test/base.test.ts"]}]
    assert only.parts[0].label == "affected: 1 of 2 JavaScript test files, from 1 changed file"


def test_vitest_s_include_and_exclude_from_its_config(tmp_path):
    config = ("import { defineConfig, configDefaults } from 'vitest/config'\n\nexport default defineConfig({\n"
              "  plugins: [],\n  test: {\n    include: ['src/**/*.spec.ts'],\n"
              "    exclude: [...configDefaults.exclude, 'src/slow/**'],\n"
              "    coverage: { include: ['test/**'] },\n  },\n})\n")
    repo = make_repo(tmp_path / "repo", {"vitest.config.ts": config, "package.json": "{}",
                                         "src/a.spec.ts": "", "src/slow/b.spec.ts": "", "test/c.test.ts": ""})
    rules = jscollect.collection(prefixes.look(["npx", "vitest", "run"], repo), repo)
    assert rules.source == "vitest.config.ts" and rules.matches is not None
    assert [p for p in ("src/a.spec.ts", "src/slow/b.spec.ts", "test/c.test.ts") if rules.matches(p)] == \
        ["src/a.spec.ts"]
    (repo / "vitest.config.ts").write_text("import shared from './shared'\nexport default { test: shared }\n")
    unread = jscollect.collection(prefixes.look(["npx", "vitest", "run"], repo), repo)
    assert unread.matches is None and "takes settings from elsewhere" in unread.why


def test_globs_as_the_runners_read_them():
    jest = jsglobs.glob("**/?(*.)+(spec|test).?([mc])[jt]s?(x)")
    assert [p for p in ("/r/a.test.js", "/r/test.js", "/r/a.spec.tsx", "/r/esm-imports-test.mjs", "/r/a.test.mts")
            if jest.match(p)] == ["/r/a.test.js", "/r/test.js", "/r/a.spec.tsx", "/r/a.test.mts"]
    vitest = jsglobs.glob("**/*.{test,spec}.?(c|m)[jt]s?(x)")
    assert vitest.match("test/base.test.ts") and not vitest.match("test/types.test-d.ts")
    assert jsglobs.glob("**/.{idea,git,cache,output,temp}/**").match("a/.cache/b.test.ts")
    for hostile in ("+(*)", "!(a)", "{1..9}"):
        with pytest.raises(jsglobs.Unreadable):
            jsglobs.glob(hostile)


# --- judging: a base failure of the command itself --------------------------------------------------------------

def test_a_base_commit_s_failure_of_the_command_is_the_targeted_command_s_too(tmp_path):
    """The base commit's whole command exited 1 with every test passed (vitest 1 failing to write its cache): the
    targeted command's same exit is pre-existing, never a new failure."""
    repo = make_repo(tmp_path / "ufo", UFO)
    whole = ["pnpm", "exec", "vitest", "run"]
    target = select.plan([whole], ["test/base.test.ts"], repo).targets[0]
    line, new = " ".join(whole), " ".join(target.argv)
    base = TestReport(passed=False, commands=[CommandResult(argv=whole, exit_code=1, duration_s=1.0,
                                                            exit_class=ExitClass.error, tests_run=3)],
                      failures=[TestFailure(name=line, message="exited 1", command=line)])
    ran = CommandResult(argv=target.argv, exit_code=1, duration_s=1.0, exit_class=ExitClass.error, tests_run=1)
    merged = TestReport(passed=False, commands=[ran], failures=[TestFailure(name=new, message="exited 1", command=new)])
    cut, loader = select.narrow(base, [target], [ran], lambda r: None)
    assert [(f.name, f.command) for f in cut.failures] == [(new, new)]
    judged = verdicts.judge(merged, cut, loader)
    assert not judged.failures and [f.name for f in judged.pre_existing] == [new]


def test_a_test_named_as_one_in_another_file_is_the_same_test_in_a_run_of_its_file_alone(tmp_path):
    """commander's 'variadic argument when ...' is in two files: a whole run named the second "... #2", a run of
    that file alone names it plainly, and the selected check saw 15 tests "lost" (PASSED WITH TEST CHANGES)."""
    from reposwarm.checks.runners import Case, distinct

    repo = make_repo(tmp_path / "repo", {"tests/a.test.js": "", "tests/b.test.js": "", "package.json": "{}"})
    jest = ["npx", "jest"]
    target = select.plan([jest], ["tests/b.test.js"], repo).targets[0]
    # (jest reported b first: numbered by file all the same, a's is "X", b's "X #2")
    whole = distinct([Case("X", "passed", "tests/b.test.js"), Case("X", "passed", "tests/a.test.js"),
                      Case("Y", "failed", "tests/b.test.js", "boom"), Case("Y", "failed", "tests/a.test.js", "boom")])
    assert [(c.name, c.file) for c in whole] == [("X #2", "tests/b.test.js"), ("X", "tests/a.test.js"),
                                                 ("Y #2", "tests/b.test.js"), ("Y", "tests/a.test.js")]
    alone = distinct([Case("X", "passed", "tests/b.test.js"), Case("Y", "failed", "tests/b.test.js", "boom")])
    line, new = " ".join(jest), " ".join(target.argv)
    base = TestReport(passed=False, commands=[CommandResult(argv=jest, exit_code=1, duration_s=1.0, tests_run=4,
                                                            exit_class=ExitClass.tests_failed, cases_ref="base")],
                      failures=[TestFailure(name=c.name, file=c.file, command=line) for c in whole
                                if c.outcome == "failed"])
    ran = CommandResult(argv=target.argv, exit_code=1, duration_s=1.0, tests_run=2, exit_class=ExitClass.tests_failed,
                        cases_ref="merged")
    merged = TestReport(passed=False, commands=[ran], failures=[TestFailure(name="Y", file="tests/b.test.js",
                                                                            command=new)])
    stored = {"base": whole, "merged": alone}
    cut, loader = select.narrow(base, [target], [ran], lambda r: stored.get(r.cases_ref or ""))
    judged = verdicts.judge(merged, cut, loader)
    assert judged.test_changes == [] and judged.failures == [], (judged.test_changes, judged.failures)
    assert [f.name for f in judged.pre_existing] == ["Y"]  # (b's failure on the base, named as its file alone)


# --- real runners, in the sandbox -----------------------------------------------------------------------------------

ARGV_TESTS = {
    "package.json": '{"name": "cli"}\n', ".gitignore": "node_modules\n",
    # commander's `program.parse()`: no arguments given, it reads process.argv, and exits on an unknown option
    "lib/cli.js": "exports.parse = (argv) => {\n  const extra = argv.slice(2).filter((a) => a.startsWith('-'));\n"
                  "  if (extra.length) { console.error('error: unknown option ' + extra[0]); process.exit(1); }\n"
                  "  return argv.slice(2);\n};\n",
    "tests/cli.test.js": "const { parse } = require('../lib/cli');\n\n"
                         "test('parses the command line', () => expect(parse(process.argv)).toEqual([]));\n",
}


@pytest.mark.skipif(not HAS_JEST, reason="jest is not installed in tests/fixtures/node/node_modules")
async def test_jest_s_tests_see_the_command_as_the_profile_wrote_it(tmp_path):
    tree = make_repo(tmp_path / "repo", ARGV_TESTS)
    (tree / "node_modules").symlink_to(NODE_MODULES)
    jest = ["node_modules/.bin/jest"]
    profile = CheckProfile(commands=[jest], read_only_paths=[str(NODE_MODULES)], timeout_s=240)
    report = await runner.run_profile(profile, tree, None, rerun=False)
    command = report.commands[0]
    # (in band: one test file; its process.argv would hold --json --outputFile=... and jest would exit 1 unreported)
    assert command.exit_code == 0 and command.tests_run == 1 and report.passed, command.output_tail
    target = select.plan([jest], ["tests/cli.test.js"], tree).targets[0]
    assert "--runTestsByPath" in target.argv
    targeted = await runner.run_profile(profile.model_copy(update={"commands": [target.argv]}), tree, None,
                                        rerun=False)
    assert targeted.commands[0].exit_code == 0 and targeted.commands[0].tests_run == 1, \
        targeted.commands[0].output_tail


@pytest.mark.skipif(not HAS_VITEST, reason="vitest is not installed in tests/fixtures/node/node_modules")
async def test_vitest_writes_no_results_cache_into_node_modules(tmp_path):
    """Checks bind a setup step's node_modules read-only; vitest 1 and 2 end with an unhandled ENOENT and exit 1
    when they cannot write their results cache there (ufo, on the base commit and the merged tree alike). Here the
    tree's node_modules is writable (links to the fixture's packages), so a cache written would be seen."""
    tree = make_repo(tmp_path / "repo", {**{k: v for k, v in UFO.items() if k != "package.json"},
                                         "package.json": '{"name": "ufo", "type": "module"}\n',
                                         ".gitignore": "node_modules\n",
                                         "test/join.test.ts": "import { test, expect } from 'vitest'\n"
                                                              "import { join } from '../src'\n\n"
                                                              "test('joins', () => expect(join('a', 'b')).toBe('ab'))\n"})
    own = tree / "node_modules"
    own.mkdir()
    for entry in NODE_MODULES.iterdir():
        if not entry.name.startswith("."):
            (own / entry.name).symlink_to(entry)
    profile = CheckProfile(commands=[["node", "node_modules/vitest/vitest.mjs", "run", "test/join.test.ts"]],
                           read_only_paths=[str(NODE_MODULES)], timeout_s=240)
    report = await runner.run_profile(profile, tree, None, rerun=False)
    command = report.commands[0]
    assert command.exit_code == 0 and command.tests_run == 1, command.output_tail
    assert sorted(p.name for p in own.iterdir() if p.name.startswith(".")) == []  # no .vite/vitest, no .vitest


@pytest.mark.skipif(not HAS_JEST or shutil.which("yarn") is None, reason="jest (tests/fixtures/node) or yarn missing")
async def test_yarn_jest_s_targeted_run_keeps_its_reporting_flags_and_selection(tmp_path):
    """`yarn jest A -- B` (yarn 1) runs `jest B`: whatever came before the `--` is yarn's. A targeted jest command
    has no `--`, so its --json report and --runTestsByPath reach jest (immer's merged tree gave no per-test results)."""
    tree = make_repo(tmp_path / "repo", {**ARGV_TESTS, "tests/other.test.js": "test('other', () => {});\n"})
    (tree / "node_modules").symlink_to(NODE_MODULES)
    yarn = ["yarn", "jest"]
    target = select.plan([yarn], ["tests/cli.test.js"], tree).targets[0]
    assert "--" not in target.argv
    profile = CheckProfile(commands=[target.argv], read_only_paths=[str(NODE_MODULES)], timeout_s=240)
    report = await runner.run_profile(profile, tree, None, rerun=False)
    command = report.commands[0]
    assert command.exit_code == 0 and command.tests_run == 1, command.output_tail  # (other.test.js: not run)

"""What a JavaScript build step's node process loaded is no build of the tree's sources (issue 44's harness: immer's
`yarn run build` ran tsup, whose node process loads a `tsup.config.bundled_<hash>.mjs` it writes at the tree's top
and removes; that script was taken for a stale build of every changed file, and the check was NOT JUDGED, "loaded
from tsup.config.bundled_..."). Real node, the real sandbox, through run_profile."""

from __future__ import annotations

import shutil

import pytest

from reposwarm.checks import evidence, runner
from reposwarm.contracts import CheckProfile
from tests.helpers import make_repo
from tests.test_caches import _sandboxed  # noqa: F401 (autouse: the test's own REPOSWARM_HOME, sandbox on)

# a tool that bundles its config beside it, loads it, and removes it (tsup, vite's config timestamps)
BUNDLER = ("const fs = require('fs');\n"
           "const name = 'tool.config.bundled_' + process.pid + '.mjs';\n"
           "fs.writeFileSync(name, 'export default { entry: [\"src/index.ts\"] }\\n');\n"
           "import(require('path').resolve(name)).then(() => { fs.unlinkSync(name); fs.mkdirSync('dist', { recursive: true });\n"
           "  fs.writeFileSync('dist/index.js', 'exports.add = (a, b) => a + b\\n'); });\n")


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_a_build_tool_s_own_temporary_script_is_no_stale_build_of_the_sources(tmp_path):
    tree = make_repo(tmp_path / "repo", {
        "package.json": '{"name": "p", "version": "1.0.0"}\n', ".gitignore": "dist\n",
        "src/index.ts": "export const add = (a: number, b: number) => a + b\n",
        "tools/bundle.cjs": BUNDLER})
    report = await runner.run_profile(CheckProfile(commands=[["node", "tools/bundle.cjs"]], timeout_s=120), tree,
                                      None, rerun=False, watched=evidence.Watched(("src/index.ts",)))
    command = report.commands[0]
    assert command.exit_code == 0, command.output_tail
    assert command.loaded is not None and "src/index.ts" not in command.loaded.outside, command.loaded
    assert report.exercise is not None and report.exercise.outside == {}
    assert "src/index.ts" not in report.exercise.loaded  # (the build step ran none of it in node)

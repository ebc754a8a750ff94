"""An outside agent's lane on a real repository, through the public surface: `reposwarm lane-test --agent acp:...`
on a clone of python-attrs/attrs, the agent the ACP agent of the tests (tests/fake_acp_agent.py), its model a
fake Chat Completions server scripting it (no real model here: the same path a real agent takes through the
worker's model proxy).

    python bench/agent_lane_try.py /path/to/attrs-clone

The script: the agent writes changelog.d/9999.change.md (its lane's slice), then tries src/attr/_make.py (readable,
not writable: refused before the write), then ends. The check is attrs' own pytest on two test files. Prints
lane-test's output; what it measured on 2 December is in docs/agents.md ("On a real repository").
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fake_models import FakeModelServer  # noqa: E402

SCRIPT = {"version": 1, "lanes": {"changelog": {1: [
    {"tool_calls": [{"id": "c1", "name": "write_file", "arguments": {
        "path": "changelog.d/9999.change.md", "content": "`attrs.fields()` says which class it was given.\n"}}]},
    {"tool_calls": [{"id": "c2", "name": "write_file", "arguments": {"path": "src/attr/_make.py", "content": "x\n"}}]},
    {"content": "Added changelog.d/9999.change.md."}]}}}
LANES = """swarm:
  lanes:
    changelog: {allowed_paths: [changelog.d/], read_only_paths: [src/]}
validation:
  profiles:
    default:
      commands:
        - [python3, -m, pytest, -q, -p, no:cacheprovider, tests/test_import.py, tests/test_funcs.py]
"""


def main() -> int:
    repo = Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory(prefix="reposwarm-agent-try-") as folder:
        clone = Path(folder) / "attrs"
        subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
        lanes = Path(folder) / "lanes.yaml"
        lanes.write_text(LANES)
        agent = "acp:" + shlex.join([sys.executable, "-I", "-c", (ROOT / "tests" / "fake_acp_agent.py").read_text()])
        with FakeModelServer("openai", SCRIPT) as fake:
            env = {**os.environ, "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-agent-lane-try",
                   "REPOSWARM_HOME": str(Path(folder) / "home")}
            done = subprocess.run([sys.executable, str(ROOT / "starter.py"), "lane-test", "--repo", str(clone),
                                   "--lane", "changelog", "--lanes", str(lanes), "--goal",
                                   "Add a changelog entry for the fields() message.", "--model", "openai:gpt-5",
                                   "--agent", agent], env=env, text=True, timeout=1200)
            subprocess.run([sys.executable, str(ROOT / "starter.py"), "dev-server", "--stop"], env=env)
            print(f"the fake model was asked {len(fake.requests)} times")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())

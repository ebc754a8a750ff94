"""Run one reposwarm worker: `python worker.py [--help]`, the same as `reposwarm worker`.

Its body is reposwarm/cli/worker.py (every workflow and activity on the shared task queue); this file is only the
entry point, as starter.py is the command line's.
"""

from reposwarm.cli.main import exit_now
from reposwarm.cli.worker import run

if __name__ == "__main__":
    exit_now(run())

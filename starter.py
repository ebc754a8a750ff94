"""reposwarm's command line: `python starter.py COMMAND ...`; `python starter.py --help` lists the commands.

The commands live in reposwarm/cli/ (main.py wires them); this file is only the entry point.
"""

from reposwarm.cli.main import exit_now, main

if __name__ == "__main__":
    exit_now(main())

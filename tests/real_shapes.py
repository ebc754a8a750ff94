"""Small repositories shaped like four real Python projects, and the lanes a careful planner proposed for a real
commit of each (issue 45): the proposals the guardrails once refused, kept as regressions.

Each repository has what the real one has where the guardrails look: a src layout, tests/ importing the package,
a changelog (CHANGELOG.md, CHANGES.rst or changelog.d/), docs/, dotfiles at the root, a pyproject.toml. Each
proposal is the planner's reply (submit_lanes' arguments), as the replay model sends it:

- click: two vertical lanes (each a feature and its own tests) that both write src/click/__init__.py, declared
  in overlaps, and a docs lane;
- attrs: four code lanes across modules and the typing stubs, a tests lane after all of them, a changelog lane
  (changelog.d/);
- structlog: a context variable's lane, two producers and a consumer that depend on it (its interface), a tests
  lane for the consumer, a changelog lane;
- humanize: a code lane, a tests lane after it, and a lane for the docs, the README, CHANGELOG.md and .gitignore.

Every project's own tests pass on its tree as it is (tests import the package from src/: conftest.py puts it
first on sys.path, as the real projects' installs do).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers import make_repo

CONFTEST = "import sys\nfrom pathlib import Path\n\nsys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'src'))\n"
GITIGNORE = "__pycache__/\n*.egg-info/\n.tox/\n"


def pyproject(name: str) -> str:
    return f'[project]\nname = "{name}"\nversion = "1.0"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'


CLICK = {
    "pyproject.toml": pyproject("click"), ".gitignore": GITIGNORE, "README.md": "# click\n",
    "CHANGES.rst": "Version 8.2\n-----------\n\n-   Unreleased\n", "docs/options.rst": "Options\n=======\n",
    "docs/commands.rst": "Commands\n========\n",
    "src/click/__init__.py": "from .core import Command, Group, Option\nfrom .exceptions import NoSuchOption, UsageError\n"
                             "from .parser import split_opt\n",
    "src/click/core.py": "from .exceptions import UsageError\n\n\nclass Command:\n    def __init__(self, name):\n"
                         "        self.name = name\n\n\nclass Group(Command):\n    def __init__(self, name):\n"
                         "        super().__init__(name)\n        self.commands = {}\n\n    def add(self, cmd):\n"
                         "        self.commands[cmd.name] = cmd\n\n    def get(self, name):\n"
                         "        if name not in self.commands:\n            raise UsageError(f'No such command {name!r}.')\n"
                         "        return self.commands[name]\n\n\nclass Option:\n    def __init__(self, name):\n"
                         "        self.name = name\n",
    "src/click/exceptions.py": "class UsageError(Exception):\n    pass\n\n\nclass NoSuchOption(UsageError):\n    pass\n",
    "src/click/parser.py": "from .exceptions import NoSuchOption\n\n\ndef split_opt(opt):\n    return opt[:2], opt[2:]\n\n\n"
                           "def match_option(name, known):\n    if name not in known:\n"
                           "        raise NoSuchOption(f'No such option: {name}')\n    return name\n",
    "tests/conftest.py": CONFTEST,
    "tests/test_options.py": "import click\nfrom click.parser import match_option\n\n\ndef test_known():\n"
                             "    assert match_option('--x', ['--x']) == '--x'\n\n\ndef test_split():\n"
                             "    assert click.split_opt('--x') == ('--', 'x')\n",
    "tests/test_commands.py": "import click\n\n\ndef test_get():\n    group = click.Group('cli')\n"
                              "    group.add(click.Command('run'))\n    assert group.get('run').name == 'run'\n",
}
CLICK_PROPOSAL: dict[str, Any] = {
    "interface_contract": "click.exceptions.NoSuchOption and UsageError carry a 'possibilities' list; "
                          "click.__init__ exports suggest(name, choices) -> list[str]",
    "summary": "suggest close matches for unknown options and commands",
    "overlaps": ["src/click/__init__.py"],
    "lanes": [
        {"name": "option-suggestions", "goal": "Suggest close option names in NoSuchOption, with tests.",
         "allowed_paths": ["src/click/parser.py", "src/click/exceptions.py", "src/click/__init__.py",
                           "tests/test_options.py"],
         "read_only_paths": ["src/click/core.py", "tests/conftest.py"]},
        {"name": "command-suggestions", "goal": "Suggest close command names in Group.get, with tests.",
         "allowed_paths": ["src/click/core.py", "src/click/__init__.py", "tests/test_commands.py"],
         "read_only_paths": ["src/click/exceptions.py", "src/click/parser.py", "tests/conftest.py"]},
        {"name": "docs", "goal": "Document the suggestions in CHANGES.rst and docs/.",
         "allowed_paths": ["CHANGES.rst", "docs/**"], "read_only_paths": ["src/click/**"]},
    ],
}

ATTRS = {
    "pyproject.toml": pyproject("attrs"), ".gitignore": GITIGNORE, "README.md": "# attrs\n",
    "CHANGELOG.md": "# Changelog\n", "changelog.d/towncrier_template.md.jinja": "{{ sections }}\n",
    "changelog.d/.gitignore": "!.gitignore\n", "docs/api.md": "# API\n",
    "src/attr/__init__.py": "from . import converters, validators\nfrom ._funcs import asdict\n"
                            "from ._make import attrib, attrs, fields\n",
    "src/attr/__init__.pyi": "from typing import Any\n\ndef asdict(inst: Any) -> dict[str, Any]: ...\n",
    "src/attr/_make.py": "def attrib(default=None):\n    return default\n\n\ndef attrs(cls):\n    return cls\n\n\n"
                         "def fields(cls):\n    return tuple(vars(cls))\n",
    "src/attr/_funcs.py": "def asdict(inst):\n    return dict(vars(inst))\n",
    "src/attr/validators.py": "def instance_of(kind):\n    return lambda value: isinstance(value, kind)\n",
    "src/attr/validators.pyi": "from typing import Any\n\ndef instance_of(kind: type) -> Any: ...\n",
    "src/attr/converters.py": "def optional(conv):\n    return lambda v: None if v is None else conv(v)\n",
    "src/attrs/__init__.py": "from attr import asdict, attrib, attrs, fields\n",
    "src/attrs/__init__.pyi": "from attr import asdict as asdict\n",
    "tests/__init__.py": "", "tests/conftest.py": CONFTEST,
    "tests/test_make.py": "from attr._make import attrib\n\n\ndef test_attrib():\n    assert attrib(1) == 1\n",
    "tests/test_funcs.py": "import attr\n\n\ndef test_asdict():\n    class C:\n        pass\n    c = C()\n    c.x = 1\n"
                           "    assert attr.asdict(c) == {'x': 1}\n",
    "tests/test_validators.py": "from attr.validators import instance_of\n\n\ndef test_instance_of():\n"
                                "    assert instance_of(int)(1)\n",
    "tests/typing_example.py": "import attrs\n\nattrs.asdict\n",
}
ATTRS_PROPOSAL: dict[str, Any] = {
    "interface_contract": "attr.fields(cls) and attrs.fields(cls) accept an instance as well as a class",
    "summary": "fields() of an instance, in the code, the stubs and the tests",
    "lanes": [
        {"name": "make", "goal": "Let _make.fields take an instance.", "allowed_paths": ["src/attr/_make.py"]},
        {"name": "funcs", "goal": "asdict uses fields() of the instance.", "allowed_paths": ["src/attr/_funcs.py"],
         "depends_on": ["make"]},
        {"name": "validators", "goal": "Validators accept what fields() gives.",
         "allowed_paths": ["src/attr/validators.py", "src/attr/converters.py"]},
        {"name": "stubs", "goal": "The typing stubs say it.", "allowed_paths": ["src/attr/*.pyi", "src/attrs/*.pyi"]},
        {"name": "tests", "goal": "Test fields() of an instance.", "allowed_paths": ["tests/**"],
         "read_only_paths": ["src/**"], "depends_on": ["make", "funcs", "validators", "stubs"]},
        {"name": "changelog", "goal": "Add changelog.d/1547.change.md.", "allowed_paths": ["changelog.d/**"]},
    ],
}

STRUCTLOG = {
    "pyproject.toml": pyproject("structlog"), ".gitignore": GITIGNORE, "README.md": "# structlog\n",
    "CHANGELOG.md": "# Changelog\n\n## Unreleased\n", "docs/contextvars.md": "# Context variables\n",
    "src/structlog/__init__.py": "from . import contextvars, dev, processors, stdlib\n",
    "src/structlog/contextvars.py": "_CONTEXT = {}\n\n\ndef bind_contextvars(**kw):\n    _CONTEXT.update(kw)\n\n\n"
                                    "def get_contextvars():\n    return dict(_CONTEXT)\n",
    "src/structlog/stdlib.py": "from .contextvars import bind_contextvars\n\n\ndef bind_request(rid):\n"
                               "    bind_contextvars(request_id=rid)\n",
    "src/structlog/dev.py": "from .contextvars import bind_contextvars\n\n\ndef bind_pid(pid):\n"
                            "    bind_contextvars(pid=pid)\n",
    "src/structlog/processors.py": "from .contextvars import get_contextvars\n\n\ndef merge(event):\n"
                                   "    return {**get_contextvars(), **event}\n",
    "tests/conftest.py": CONFTEST,
    "tests/test_contextvars.py": "from structlog.contextvars import bind_contextvars, get_contextvars\n\n\n"
                                 "def test_bind():\n    bind_contextvars(a=1)\n    assert get_contextvars()['a'] == 1\n",
    "tests/test_stdlib.py": "from structlog import stdlib\nfrom structlog.contextvars import get_contextvars\n\n\n"
                            "def test_request():\n    stdlib.bind_request('r')\n"
                            "    assert get_contextvars()['request_id'] == 'r'\n",
    "tests/test_processors.py": "from structlog.processors import merge\n\n\ndef test_merge():\n"
                                "    assert merge({'e': 1})['e'] == 1\n",
}
STRUCTLOG_PROPOSAL: dict[str, Any] = {
    "interface_contract": "structlog.contextvars exposes reset_contextvars(**kw) -> None",
    "summary": "a reset for the context variables, used by two producers and the merging processor",
    "lanes": [
        {"name": "contextvars", "goal": "Add reset_contextvars, with its tests.",
         "allowed_paths": ["src/structlog/contextvars.py", "tests/test_contextvars.py"]},
        {"name": "stdlib", "goal": "Reset the request's context in bind_request, with its tests.",
         "allowed_paths": ["src/structlog/stdlib.py", "tests/test_stdlib.py"], "depends_on": ["contextvars"],
         "read_only_paths": ["src/structlog/contextvars.py"]},
        {"name": "dev", "goal": "Reset the pid's context in bind_pid.", "allowed_paths": ["src/structlog/dev.py"],
         "depends_on": ["contextvars"], "read_only_paths": ["src/structlog/contextvars.py"]},
        {"name": "processors", "goal": "merge() reads the context after a reset.",
         "allowed_paths": ["src/structlog/processors.py"], "depends_on": ["contextvars"]},
        {"name": "processor-tests", "goal": "Test merge() after a reset.",
         "allowed_paths": ["tests/test_processors.py"], "depends_on": ["processors"]},
        {"name": "changelog", "goal": "Say it in CHANGELOG.md and the docs.",
         "allowed_paths": ["CHANGELOG.md", "docs/**"]},
    ],
}

HUMANIZE = {
    "pyproject.toml": pyproject("humanize"), ".gitignore": GITIGNORE, "README.md": "# humanize\n",
    "CHANGELOG.md": "# Changelog\n", "mkdocs.yml": "site_name: humanize\n", "docs/index.md": "# humanize\n",
    "docs/number.md": "# Number\n",
    "src/humanize/__init__.py": "from humanize.number import intcomma, ordinal\n",
    "src/humanize/number.py": "def intcomma(value):\n    return f'{value:,}'\n\n\ndef ordinal(value):\n"
                              "    return f'{value}th'\n",
    "tests/__init__.py": "", "tests/conftest.py": CONFTEST,
    "tests/test_number.py": "import humanize\n\n\ndef test_intcomma():\n    assert humanize.intcomma(1000) == '1,000'\n",
}
HUMANIZE_PROPOSAL: dict[str, Any] = {
    "interface_contract": "humanize.number.ordinal(value) gives 1st, 2nd, 3rd, 4th",
    "summary": "ordinal suffixes, tested and documented",
    "lanes": [
        {"name": "number", "goal": "Give ordinal() the right suffixes.",
         "allowed_paths": ["src/humanize/number.py", "src/humanize/__init__.py"]},
        {"name": "tests", "goal": "Test ordinal().", "allowed_paths": ["tests/**"], "read_only_paths": ["src/**"],
         "depends_on": ["number"]},
        {"name": "docs", "goal": "Document ordinal() in the docs, the README and the changelog.",
         "allowed_paths": ["docs/**", "README.md", "CHANGELOG.md", ".gitignore", "mkdocs.yml"]},
    ],
}

SHAPES: dict[str, tuple[dict[str, str], dict[str, Any]]] = {
    "click": (CLICK, CLICK_PROPOSAL), "attrs": (ATTRS, ATTRS_PROPOSAL), "structlog": (STRUCTLOG, STRUCTLOG_PROPOSAL),
    "humanize": (HUMANIZE, HUMANIZE_PROPOSAL)}


def shaped_repo(tmp_path: Path, name: str) -> Path:
    """The repository shaped like `name`, committed on main."""
    return make_repo(tmp_path / name, SHAPES[name][0])

"""PathPolicy on a real folder: what a lane may read, list and write, and every way of asking for more."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reposwarm.slices.policy import MAX_WRITE_BYTES, PathPolicy, PathRefused

ALLOWED = ["services/api/", "services/**/tests/", "./clients/web/src/"]
READ_ONLY = ["db/", "services/api/generated/", "docs/**/*.md"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A small repository tree (no git needed: PathPolicy only looks at paths)."""
    for rel in ("services/api/app.py", "services/api/generated/schema.py", "services/api/tests/test_app.py",
                "services/web/deep/tests/test_x.py", "services/other.py", "clients/web/src/client.js",
                "db/schema.sql", "x/db/y", "docs/guide/intro.md", "README.md", ".git/config", ".git/HEAD",
                "sub/.git/HEAD"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)
    return tmp_path


@pytest.fixture
def policy(root: Path) -> PathPolicy:
    return PathPolicy(root, ALLOWED, READ_ONLY)


def refused(call, *args, **kwargs) -> str:
    with pytest.raises(PathRefused) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert message.strip(), "a refusal must say why"
    return message


# --- what is allowed, and what it returns ---


def test_allowed_path_returns_rel_and_real(policy: PathPolicy, root: Path) -> None:
    rel, real = policy.for_write("services/api/app.py")
    assert rel == "services/api/app.py"
    assert real == root.resolve() / "services/api/app.py"


def test_new_file_in_allowed_folder(policy: PathPolicy, root: Path) -> None:
    rel, real = policy.for_write("services/api/new/module.py", size=10)
    assert (rel, real) == ("services/api/new/module.py", root.resolve() / "services/api/new/module.py")


def test_dot_slash_is_normalised(policy: PathPolicy, root: Path) -> None:
    assert policy.for_write("./services/api/x.py") == ("services/api/x.py", root.resolve() / "services/api/x.py")
    assert policy.for_read("services/./api//x.py")[0] == "services/api/x.py"
    assert policy.for_write("services/api/sub/../x.py")[0] == "services/api/x.py"


@pytest.mark.parametrize("rel", ["services/api/tests/test_app.py", "services/web/deep/tests/test_x.py",
                                 "services/tests/test_top.py"])
def test_double_star_spans_folders(policy: PathPolicy, rel: str) -> None:
    assert policy.for_write(rel)[0] == rel


def test_pattern_with_leading_dot_slash(policy: PathPolicy) -> None:
    assert policy.for_write("clients/web/src/client.js")[0] == "clients/web/src/client.js"


def test_trailing_slash_covers_the_whole_folder(policy: PathPolicy) -> None:
    assert policy.writable("services/api/a/b/c/d.py")
    assert not policy.writable("services/apix/d.py")
    assert not policy.writable("services/other.py")


def test_patterns_are_anchored_at_the_root(root: Path) -> None:
    policy = PathPolicy(root, ["db/"], ["docs/"])
    assert policy.writable("db/schema.sql")
    assert not policy.readable("x/db/y")
    assert not policy.writable("x/db/y")
    refused(policy.for_write, "x/db/y")
    refused(policy.for_read, "x/db/y")
    assert policy.readable("docs/a.md") and not policy.readable("x/docs/a.md")


def test_double_star_is_anchored_too(policy: PathPolicy) -> None:
    assert not policy.writable("other/services/api/tests/t.py")
    refused(policy.for_write, "other/services/api/tests/t.py")


# --- for_write refusals ---


@pytest.mark.parametrize("path", [
    "../x",
    "/etc/passwd",
    "a/../../x",
    "services/api/../../../x",
    "x\x00y",
    "C:\\x",
    "C:/x",
    "services\\api\\x.py",
    ".git/config",
    ".git",
    "sub/.git/HEAD",
    "services/api/.git/config",
    "",
    "   ",
])
def test_for_write_refuses_bad_spellings(policy: PathPolicy, path: str) -> None:
    refused(policy.for_write, path)


def test_for_write_refuses_read_only(policy: PathPolicy) -> None:
    assert "read-only" in refused(policy.for_write, "db/schema.sql")
    # read-only wins over allowed where they overlap
    assert "read-only" in refused(policy.for_write, "services/api/generated/schema.py")
    assert "read-only" in refused(policy.for_write, "docs/guide/intro.md")


def test_for_write_refuses_outside_allowed(policy: PathPolicy) -> None:
    message = refused(policy.for_write, "README.md")
    assert "services/api/" in message  # names the lane's allowed paths
    refused(policy.for_write, "services/other.py")


def test_for_write_refuses_symlink_out_of_the_repo(policy: PathPolicy, root: Path) -> None:
    outside = root.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.txt").write_text("secret")
    os.symlink(outside, root / "services/api/escape")
    os.symlink(outside / "secret.txt", root / "services/api/secret.txt")
    for path in ("services/api/escape", "services/api/escape/secret.txt", "services/api/escape/new.py",
                 "services/api/secret.txt"):
        assert "outside the repository" in refused(policy.for_write, path)
        refused(policy.for_read, path)


def test_for_write_refuses_symlink_to_read_only_file(policy: PathPolicy, root: Path) -> None:
    os.symlink(root / "db/schema.sql", root / "services/api/schema_link.sql")
    message = refused(policy.for_write, "services/api/schema_link.sql")
    assert "db/schema.sql" in message
    # reading through it is fine: the target is readable for the lane
    rel, real = policy.for_read("services/api/schema_link.sql")
    assert rel == "services/api/schema_link.sql" and real == root.resolve() / "db/schema.sql"


def test_for_write_refuses_symlink_into_git(policy: PathPolicy, root: Path) -> None:
    os.symlink(root / ".git", root / "services/api/g")
    refused(policy.for_write, "services/api/g/config")
    refused(policy.for_read, "services/api/g/config")


def test_for_write_refuses_symlinked_folder_to_unlisted_place(policy: PathPolicy, root: Path) -> None:
    os.symlink(root / "services", root / "services/api/up")  # services/api/up/other.py -> services/other.py
    refused(policy.for_write, "services/api/up/other.py")
    refused(policy.for_read, "services/api/up/other.py")


def test_symlink_within_allowed_is_fine(policy: PathPolicy, root: Path) -> None:
    os.symlink(root / "services/api/app.py", root / "services/api/alias.py")
    rel, real = policy.for_write("services/api/alias.py")
    assert rel == "services/api/alias.py" and real == root.resolve() / "services/api/app.py"


def test_for_write_size_limit(policy: PathPolicy) -> None:
    assert policy.for_write("services/api/big.bin", size=MAX_WRITE_BYTES)[0] == "services/api/big.bin"
    message = refused(policy.for_write, "services/api/big.bin", size=MAX_WRITE_BYTES + 1)
    assert str(MAX_WRITE_BYTES) in message


# --- for_read ---


def test_for_read_allows_allowed_and_read_only(policy: PathPolicy, root: Path) -> None:
    assert policy.for_read("services/api/app.py") == ("services/api/app.py", root.resolve() / "services/api/app.py")
    assert policy.for_read("db/schema.sql") == ("db/schema.sql", root.resolve() / "db/schema.sql")
    assert policy.for_read("docs/guide/intro.md")[0] == "docs/guide/intro.md"


@pytest.mark.parametrize("path", ["README.md", "services/other.py", "x/db/y", "docs/guide/notes.txt",
                                  ".git", ".git/config", "sub/.git/HEAD", "../x", "/etc/passwd"])
def test_for_read_refuses(policy: PathPolicy, path: str) -> None:
    refused(policy.for_read, path)


# --- for_list ---


def test_for_list_allows_root_and_any_folder(policy: PathPolicy, root: Path) -> None:
    assert policy.for_list(".") == ("", root.resolve())
    assert policy.for_list("./") == ("", root.resolve())
    assert policy.for_list("docs") == ("docs", root.resolve() / "docs")  # outside the lane: listing is filtered later


@pytest.mark.parametrize("path", ["..", "../", "a/../..", ".git", "sub/.git", "/"])
def test_for_list_refuses(policy: PathPolicy, path: str) -> None:
    refused(policy.for_list, path)


def test_root_symlink_is_resolved(tmp_path: Path) -> None:
    real_root = tmp_path / "real"
    (real_root / "a").mkdir(parents=True)
    os.symlink(real_root, tmp_path / "link")
    policy = PathPolicy(tmp_path / "link", ["a/"])
    assert policy.root == real_root.resolve()
    assert policy.for_write("a/f.py") == ("a/f.py", real_root.resolve() / "a/f.py")

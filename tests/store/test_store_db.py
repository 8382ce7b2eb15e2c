"""Where the store lives: URL resolution and precedence, and databases that cannot be opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from nestbed.errors import EnvironmentProblem, UserError
from nestbed.store import Store, default_db_path, redact, resolve_db_url


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """A clean environment: no NESTBED_DB, XDG_DATA_HOME and HOME under tmp_path."""
    monkeypatch.delenv("NESTBED_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_default_is_sqlite_under_xdg_data_home(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert resolve_db_url(None) == f"sqlite:///{tmp_path}/xdg/nestbed/nestbed.db"


def test_default_without_xdg_is_under_local_share(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.delenv("XDG_DATA_HOME")
    assert resolve_db_url(None) == f"sqlite:///{tmp_path}/home/.local/share/nestbed/nestbed.db"


def test_relative_xdg_data_home_is_ignored(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.setenv("XDG_DATA_HOME", "relative/dir")
    assert default_db_path() == tmp_path / "home" / ".local" / "share" / "nestbed" / "nestbed.db"


def test_env_var_beats_default(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.setenv("NESTBED_DB", str(tmp_path / "from-env.db"))
    assert resolve_db_url(None) == f"sqlite:///{tmp_path}/from-env.db"


def test_explicit_beats_env_var(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.setenv("NESTBED_DB", str(tmp_path / "from-env.db"))
    assert resolve_db_url(str(tmp_path / "explicit.db")) == f"sqlite:///{tmp_path}/explicit.db"


def test_empty_values_fall_through(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.setenv("NESTBED_DB", "")
    assert resolve_db_url("") == f"sqlite:///{tmp_path}/xdg/nestbed/nestbed.db"


def test_relative_path_is_made_absolute(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.chdir(tmp_path)
    assert resolve_db_url("sub/x.db") == f"sqlite:///{tmp_path}/sub/x.db"


def test_home_in_path_is_expanded(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert resolve_db_url("~/x.db") == f"sqlite:///{tmp_path}/home/x.db"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:pw@db.example/nestbed", "postgresql+psycopg://u:pw@db.example/nestbed"),
        ("postgres://u@db.example:5433/x", "postgresql+psycopg://u@db.example:5433/x"),
        ("postgresql+psycopg://u@/x?host=/run/pg", "postgresql+psycopg://u@/x?host=/run/pg"),
        ("sqlite:////var/lib/x.db", "sqlite:////var/lib/x.db"),
    ],
)
def test_urls_are_kept_and_postgresql_uses_psycopg3(
    env: pytest.MonkeyPatch, given: str, expected: str
) -> None:
    assert resolve_db_url(given) == expected
    env.setenv("NESTBED_DB", given)
    assert resolve_db_url(None) == expected


def test_redact_hides_the_password() -> None:
    assert redact("postgresql+psycopg://u:s3cret@h/db") == "postgresql+psycopg://u:***@h/db"


def test_default_location_is_created_on_open(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with Store.open() as store:
        assert store.list() == []
    assert (tmp_path / "xdg" / "nestbed" / "nestbed.db").is_file()


def test_unreachable_postgresql_is_an_environment_problem_without_password(
    tmp_path: Path,
) -> None:
    url = f"postgresql://nestbed:s3cret-pw@/nestbed?host={tmp_path}/no-server-here"
    with pytest.raises(EnvironmentProblem) as caught:
        Store.open(url)
    message = str(caught.value)
    assert "s3cret-pw" not in message
    assert message.startswith(
        f"cannot open the nestbed database postgresql+psycopg://nestbed:***@/nestbed"
        f"?host={tmp_path}/no-server-here ("
    )
    assert message.endswith(
        "); start the PostgreSQL server or set NESTBED_DB or --db to a reachable database"
    )


def test_refused_tcp_connection_is_an_environment_problem() -> None:
    with pytest.raises(EnvironmentProblem) as caught:
        Store.open("postgresql://nestbed:s3cret-pw@127.0.0.1:1/nestbed")
    assert "s3cret-pw" not in str(caught.value)
    assert "postgresql+psycopg://nestbed:***@127.0.0.1:1/nestbed" in str(caught.value)


def test_sqlite_in_unusable_directory_is_an_environment_problem(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(EnvironmentProblem) as caught:
        Store.open(str(blocker / "nestbed.db"))
    assert str(caught.value).startswith(f"cannot create the directory '{blocker}'")
    assert str(caught.value).endswith("set NESTBED_DB or --db to a writable location")


def test_unsupported_backend_is_a_user_error() -> None:
    with pytest.raises(UserError) as caught:
        Store.open("mysql://u:pw@h/db")
    assert str(caught.value) == (
        "database URL 'mysql://u:***@h/db' uses the unsupported backend 'mysql'; "
        "use a file path, a sqlite:/// URL or a postgresql:// URL"
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@h/db?host=/run/pg", "postgresql://u:***@h/db?host=/run/pg"),
        ("postgresql://u:p%40ss@h:5433/db", "postgresql://u:***@h:5433/db"),
        ("postgresql://u@h:5432/db", "postgresql://u@h:5432/db"),
        ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
    ],
)
def test_redact_keeps_the_url_as_given_but_the_password(url: str, shown: str) -> None:
    assert redact(url) == shown


@pytest.mark.parametrize(
    "given", [None, "a/b.db", "~/q.db", "/abs/../q.db", "./x//y.db", "postgresql://u@h/db"]
)
def test_the_store_file_is_named_as_pathlib_names_it(env, given) -> None:
    # store.paths works with os.path (`nestbed exec` does not import pathlib): the same
    # file as Path(value).expanduser().absolute(), or the default, or None for a URL.
    from nestbed.store.paths import sqlite_file, sqlite_path

    expected = (
        default_db_path()
        if given is None
        else None
        if "://" in given
        else Path(given).expanduser().absolute()
    )
    assert sqlite_file(given) == expected
    found = sqlite_path(given)
    assert (found if found is None else Path(found)) == expected

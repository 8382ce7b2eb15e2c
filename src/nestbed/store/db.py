"""Where the experiment store lives and how to connect to it.

``resolve_db_url`` turns what the user gave (``--db``, ``NESTBED_DB`` or nothing) into one
SQLAlchemy URL; ``connect`` builds an engine for it, checks that the database can be reached and
translates driver errors into ``EnvironmentProblem``. SQLite is configured so that every
transaction is a real ``BEGIN IMMEDIATE`` one (DDL included), which makes migrations atomic and
serializes concurrent writers instead of failing them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url

from nestbed.errors import EnvironmentProblem, UserError
from nestbed.store.paths import ENV_VAR, default_db_path

READ_ONLY = "nestbed_read_only"
"""The execution option of a connection whose transactions only read (``Store.reading``)."""
SQLITE_POOL = {"pool_size": 20, "max_overflow": 40}
"""Connections kept for a SQLite store: a server's request threads (anyio's 40), its
operations and its loop each hold one while they work; SQLite's are cheap."""
SQLITE_BUSY_TIMEOUT_S = 30.0
"""How long a SQLite writer waits for another writer before giving up."""
_CURSORS = "nestbed_cursors"
"""The key, in a SQLite connection's ``info``, of the cursors its current block opened."""
PG_CONNECT_TIMEOUT_S = 10
"""How long connecting to a PostgreSQL server may take before it counts as unreachable."""

_PG_ALIASES = ("postgresql", "postgres", "postgresql+psycopg")
_SUPPORTED_BACKENDS = ("sqlite", "postgresql")
_PASSWORD = re.compile(r"^([^:/]+://[^:/@]*):[^@/]*@")


def resolve_db_url(explicit: str | None, environ: dict[str, str] | None = None) -> str:
    """The database URL to use: ``explicit``, else ``$NESTBED_DB``, else the default SQLite file.

    Each may be a file path (made absolute) or a SQLAlchemy URL; ``postgresql://`` and
    ``postgres://`` URLs are normalized to the psycopg 3 driver (``postgresql+psycopg://``).
    """
    env = os.environ if environ is None else environ
    if explicit:
        return _normalize(explicit, origin="--db")
    from_env = env.get(ENV_VAR, "")
    if from_env:
        return _normalize(from_env, origin=ENV_VAR)
    return _sqlite_url(default_db_path(env))


def redact(url: str) -> str:
    """``url`` as given, with any password replaced by ``***``, fit to show to a user."""
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError:
        return url
    if parsed.password is None:
        return url
    hidden = _PASSWORD.sub(r"\1:***@", url, count=1)
    return hidden if hidden != url else parsed.render_as_string(hide_password=True)


def connect(url: str) -> Engine:
    """An engine for ``url`` whose database is known to be reachable right now.

    Raises ``EnvironmentProblem`` naming the URL (password hidden) and the fix when the database
    cannot be opened, and ``UserError`` when the URL names an unsupported backend.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend not in _SUPPORTED_BACKENDS:
        raise UserError(
            f"database URL {redact(url)!r} uses the unsupported backend {backend!r}; "
            "use a file path, a sqlite:/// URL or a postgresql:// URL"
        )
    if backend == "sqlite":
        _make_sqlite_parent(parsed, url)
    try:
        engine = sa.create_engine(parsed, **_engine_options(backend))
    except ImportError as exc:
        raise EnvironmentProblem(
            f"the database driver for {redact(url)!r} is not installed ({exc.name}); "
            "use a postgresql+psycopg:// URL or run `make setup`"
        ) from exc
    if backend == "sqlite":
        _make_sqlite_transactional(engine)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.DBAPIError as exc:
        engine.dispose()
        raise unreachable(url, exc) from exc
    return engine


def unreachable(url: str, exc: BaseException) -> EnvironmentProblem:
    """The error for a database that cannot be opened, with the driver's first line as reason."""
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    detail = reason[0] if reason else type(exc).__name__
    password = make_url(url).password
    if password:
        detail = detail.replace(str(password), "***")
    if make_url(url).get_backend_name() == "sqlite":
        fix = "check that its directory exists and is writable, or set NESTBED_DB or --db"
    else:
        fix = "start the PostgreSQL server or set NESTBED_DB or --db to a reachable database"
    return EnvironmentProblem(f"cannot open the nestbed database {redact(url)} ({detail}); {fix}")


def _normalize(value: str, *, origin: str) -> str:
    if "://" not in value:
        return _sqlite_url(Path(value).expanduser().absolute())
    try:
        parsed = make_url(value)
    except sa.exc.ArgumentError as exc:
        raise UserError(
            f"database URL {value!r} from {origin} is not a valid URL; "
            "use a file path, a sqlite:/// URL or a postgresql:// URL"
        ) from exc
    if parsed.drivername in _PG_ALIASES:
        return "postgresql+psycopg://" + value.split("://", 1)[1]
    return value


def _sqlite_url(path: Path) -> str:
    return URL.create("sqlite", database=str(path)).render_as_string(hide_password=False)


def _make_sqlite_parent(parsed: URL, url: str) -> None:
    database = parsed.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    parent = Path(database).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot create the directory {str(parent)!r} for the nestbed database "
            f"{redact(url)} ({exc.strerror}); set NESTBED_DB or --db to a writable location"
        ) from exc


def _engine_options(backend: str) -> dict[str, Any]:
    if backend == "sqlite":
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}, **SQLITE_POOL}
    return {
        "connect_args": {"connect_timeout": PG_CONNECT_TIMEOUT_S},
        "pool_pre_ping": True,
    }


def _make_sqlite_transactional(engine: Engine) -> None:
    """Let SQLAlchemy, not pysqlite, issue BEGIN; take the write lock at BEGIN; enforce FKs."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        # In WAL mode (a server's store, ``use_wal``) a commit need not wait for the disk
        # twice: NORMAL keeps the database whole through a crash, losing at most the last
        # commits before a power cut.
        if cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "before_cursor_execute")
    def _on_execute(conn: sa.Connection, cursor: Any, *_: Any) -> None:
        conn.info.setdefault(_CURSORS, []).append(cursor)

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info.pop(_CURSORS, None)  # the block is over: its cursors are its own

    @event.listens_for(engine, "invalidate")
    def _on_invalidate(_dbapi_connection: Any, record: Any, _exc: Any) -> None:
        # SQLAlchemy closes a connection that an interrupt cut in a statement; a cursor
        # still alive would keep it open, its transaction and lock with it (``let_go``).
        _close_cursors(record.info)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        # A transaction that only reads (``READ_ONLY``) takes no write lock: in WAL mode
        # (the server's) it then neither waits for writers nor holds them up. It issues no
        # BEGIN either: each of its statements reads the last commit on its own, and its
        # end commits nothing. A read is then one statement, not three (BEGIN, SELECT,
        # COMMIT), each of which lets go of the interpreter's lock and waits to take it
        # back: on a busy server those waits were most of a read's time. The store's reads
        # are one statement each, or two that need not agree (``Store.runs``).
        if not conn.get_execution_options().get(READ_ONLY, False):
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def let_go(conn: sa.Connection) -> None:
    """Closes the cursors a block of work on ``conn`` opened, once it failed.

    A SQLite statement stepped but not read to its end holds its lock on the file (a shared
    lock: no other connection can commit) until its cursor is closed, and closing the
    connection does not close it (nor end its transaction: the connection lives on). A block
    cut short between a query and its rows (a signal, most often) leaves such a cursor alive
    in its frames for as long as the exception's traceback is kept, which may be the rest of
    the process: a sweep interrupted in a read could no longer write its store ("database is
    locked") to swap its point out.
    """
    if not conn.invalidated:  # else its cursors were closed with it (``_on_invalidate``)
        _close_cursors(conn.info)


def _close_cursors(info: dict[Any, Any]) -> None:
    for cursor in info.pop(_CURSORS, ()):
        cursor.close()


def use_wal(engine: Engine) -> None:
    """Puts a SQLite database in WAL mode (it stays so, in the file): readers and the one
    writer then no longer wait for each other, which a server with many clients needs.
    Connections opened before keep their synchronous setting; the server calls this first."""
    if engine.dialect.name != "sqlite":
        return
    raw = engine.raw_connection()  # outside a transaction, where the mode can change
    try:
        raw.cursor().execute("PRAGMA journal_mode = WAL").fetchall()
    finally:
        raw.close()
    engine.dispose()  # new connections see WAL and set synchronous = NORMAL (``_on_connect``)

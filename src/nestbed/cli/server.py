"""`nestbed serve` (the shared testbed's server) and `nestbed server ...`, which manage its
users, tokens and projects directly in its store, on the server machine.

FastAPI and uvicorn are imported only when `serve` runs: every other command stays as fast
as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from nestbed.cli.common import JsonOption, app, err, out, print_json, state
from nestbed.errors import UserError

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="The server's store: a SQLite path or PostgreSQL URL (default: --db, NESTBED_DB "
        "or ~/.local/share/nestbed).",
    ),
]

server = typer.Typer(
    help="Users, tokens and projects of a shared testbed, in its store (on the server machine).",
    no_args_is_help=True,
)


@contextlib.contextmanager
def _accounts(store: str | None) -> Iterator[Any]:
    """The accounts in the server's store, closed after the block."""
    from nestbed.store import Store
    from nestbed.store.accounts import Accounts

    with Store.open(store or state.db) as opened:
        yield Accounts(opened)


def _new_user(store: str | None, name: str, *, admin: bool, how: str) -> None:
    """Adds a user with a first token, audited as done by ``how``; prints the token once."""
    with _accounts(store) as accounts:
        accounts.add_user(name, admin=admin)
        _, token = accounts.add_token(name, "first")
        accounts.audit(None, "user.add", f"ok: {name}{' (admin)' if admin else ''} ({how})")
    _print_token(name, token)


def _results_root(store: str | None) -> Path:
    from nestbed.store.paths import default_db_path, sqlite_file

    found = sqlite_file(store or state.db)
    return (found or default_db_path()).parent / "results"


def _print_token(user: str, token: str) -> None:
    out.print(f"token of {user} (shown this once; the server keeps only its hash):")
    print(token)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8722,
    store: StoreOption = None,
    results_root: Annotated[
        Path | None,
        typer.Option(help="Where runs write their results (default: beside a SQLite store)."),
    ] = None,
    init_admin: Annotated[
        str | None,
        typer.Option(
            "--init-admin",
            metavar="NAME",
            help="Create the admin user NAME, print their token once, and exit.",
        ),
    ] = None,
    idle_s: Annotated[
        float, typer.Option(help="Swap out an experiment idle this long (s; Emulab: 4 h).")
    ] = 4 * 3600,
    idle_warn_s: Annotated[
        float, typer.Option(help="Warn this long before an idle or maximum-duration swap-out.")
    ] = 1800,
    max_duration_s: Annotated[
        float, typer.Option(help="Swap out an experiment swapped in this long (s; 0: never).")
    ] = 16 * 3600,
    tick_s: Annotated[
        float, typer.Option(help="Seconds between the background loop's rounds.")
    ] = 5.0,
    hosts: Annotated[
        Path | None,
        typer.Option(
            "--hosts",
            help="This machine as hosts.yaml (docs/mapper.md): its cores, memory, node slots "
            "and link emulator packet rate (linkd_pps) for admission control (default: the "
            "measured cores and memory; the packet rate is then not checked).",
        ),
    ] = None,
    trusted_project: Annotated[
        list[str] | None,
        typer.Option(
            "--trusted-project",
            metavar="NAME",
            help="Run project NAME's programs as root, unconfined (repeat for more; "
            "docs/server.md says what that gives away).",
        ),
    ] = None,
    max_sessions: Annotated[
        int,
        typer.Option(
            "--max-sessions",
            metavar="N",
            help="Exec and shell sessions one user may have open at once, across all their "
            "projects (0: no limit).",
        ),
    ] = 8,
) -> None:
    """Serve the shared testbed's HTTP API (JSON; OpenAPI at /openapi.json)."""
    if init_admin is not None:
        _new_user(store, init_admin, admin=True, how="nestbed serve --init-admin")
        return
    import uvicorn

    from nestbed.server.app import create_app
    from nestbed.server.config import ServerConfig
    from nestbed.server.idle import IdleSettings
    from nestbed.server.policies import capacity_of

    capacity_of(hosts)  # a bad hosts.yaml is one sentence now, not a failed start later
    if not tick_s > 0:
        raise UserError(f"--tick-s {tick_s} is not a positive number of seconds")
    if max_sessions < 0:
        raise UserError(f"--max-sessions {max_sessions} is negative; give 0 for no limit")
    idle = IdleSettings(idle_s=idle_s, warn_before_s=idle_warn_s,
                        max_duration_s=max_duration_s or None)  # fmt: skip
    config = ServerConfig(
        store=store or state.db,
        host=host,
        port=port,
        results_root=(results_root or _results_root(store)).absolute(),
        tick_s=tick_s,
        idle=idle,
        hosts=hosts.absolute() if hosts else None,
        trusted_projects=frozenset(trusted_project or ()),
        max_sessions=max_sessions or None,
    )
    err.print(f"nestbed serving on http://{host}:{port} (results in {config.results_root})")
    uvicorn.run(create_app(config), host=host, port=port, log_config=_log_config())


def _log_config() -> dict[str, Any]:
    """uvicorn's logging, with the server's own log (``nestbed.server``: reconciliation,
    admission, the policies' decisions, slow requests) through the same handler."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["nestbed"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config


@server.command("user-add")
def user_add(
    name: Annotated[str, typer.Argument(help="User name (lower case, digits, '-').")],
    admin: Annotated[bool, typer.Option("--admin", help="An admin of the server.")] = False,
    store: StoreOption = None,
) -> None:
    """Add a user and print their first token (once)."""
    _new_user(store, name, admin=admin, how="nestbed server user-add")


@server.command("token-add")
def token_add(
    user: Annotated[str, typer.Argument(help="The token's user.")],
    label: Annotated[str | None, typer.Option(help="What the token is for.")] = None,
    store: StoreOption = None,
) -> None:
    """Add a token for a user and print it (once)."""
    with _accounts(store) as accounts:
        _, token = accounts.add_token(user, label)
        accounts.audit(None, "token.add", f"ok: for {user} (nestbed server token-add)")
    _print_token(user, token)


@server.command("project-add")
def project_add(
    name: Annotated[str, typer.Argument(help="Project name (lower case, digits, '-').")],
    leader: Annotated[str, typer.Option(help="The user who leads it.")],
    store: StoreOption = None,
) -> None:
    """Add a project led by a user."""
    with _accounts(store) as accounts:
        accounts.add_project(name, leader)
        accounts.audit(None, "project.add", f"ok: led by {leader}", project=name)
    out.print(f"project {name} is led by {leader}")


@server.command("member-add")
def member_add(
    project: Annotated[str, typer.Argument(help="Project name.")],
    user: Annotated[str, typer.Argument(help="User name.")],
    leader: Annotated[bool, typer.Option("--leader", help="As a leader of the project.")] = False,
    store: StoreOption = None,
) -> None:
    """Add a user to a project (or change their role)."""
    role = "leader" if leader else "member"
    with _accounts(store) as accounts:
        accounts.set_member(project, user, role)
        accounts.audit(None, "member.set", f"ok: {user} is {role}", project=project)
    out.print(f"{user} is a {role} of project {project}")


@server.command("users")
def users(store: StoreOption = None, as_json: JsonOption = False) -> None:
    """List the users with their projects and roles."""
    with _accounts(store) as accounts:
        rows = [
            {"name": u.name, "admin": u.is_admin,
             "projects": {m.project: m.role for m in accounts.memberships(u.name)}}
            for u in accounts.users()
        ]  # fmt: skip
    if as_json:
        print_json(rows)
        return
    for row in rows:
        roles = ", ".join(f"{p} ({r})" for p, r in row["projects"].items()) or "no project"
        out.print(f"{row['name']}{' (admin)' if row['admin'] else ''}: {roles}")


batch = typer.Typer(
    help="The batch queue of a nestbed server (--server): experiments that run when they fit.",
    no_args_is_help=True,
)


def _remote(what: str = "the batch queue is"):  # type: ignore[no-untyped-def]
    if not state.server:
        raise UserError(f"{what} a server's; pass --server URL or set NESTBED_SERVER")
    from nestbed.cli import remote

    return remote


@batch.command("submit")
def batch_submit(
    target: Annotated[str, typer.Argument(help="Experiment file or name (on the server).")],
    priority: Annotated[int, typer.Option(help="Higher starts first (-100 to 100).")] = 0,
    as_json: JsonOption = False,
) -> None:
    """Queue an experiment: it runs (swap in, run, swap out) once it fits on the machine."""
    _remote().batch_submit(target, priority, as_json)


@batch.command("list")
def batch_list(as_json: JsonOption = False) -> None:
    """List the project's batch entries, ended ones included."""
    _remote().batch_list(as_json)


@batch.command("cancel")
def batch_cancel(entry: Annotated[int, typer.Argument(help="Batch entry id.")]) -> None:
    """Cancel a batch entry: a queued one never runs, a running one is swapped out (results
    kept)."""
    _remote().batch_cancel(entry)


project = typer.Typer(
    help="Your project on a nestbed server (--server): its policy settings.",
    no_args_is_help=True,
)


@project.command("settings")
def project_settings(
    idle_s: Annotated[
        float | None, typer.Option(help="Swap out an experiment idle this long (s).")
    ] = None,
    idle_warn_s: Annotated[
        float | None, typer.Option(help="Warn this long before an idle or duration swap-out.")
    ] = None,
    max_duration_s: Annotated[
        float | None, typer.Option(help="Swap out an experiment swapped in this long (0: never).")
    ] = None,
    priority_min: Annotated[
        int | None, typer.Option(help="Lowest batch priority members may ask for.")
    ] = None,
    priority_max: Annotated[
        int | None, typer.Option(help="Highest batch priority members may ask for.")
    ] = None,
    unset: Annotated[
        list[str] | None,
        typer.Option(
            help="Set back to the server's default: idle-s, idle-warn-s, "
            "max-duration-s, priority-min or priority-max (repeatable)."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Show the project's settings; with options, change them (a project leader)."""
    given = {"idle_s": idle_s, "warn_before_s": idle_warn_s, "max_duration_s": max_duration_s,
             "priority_min": priority_min, "priority_max": priority_max}  # fmt: skip
    changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    names = {"idle-s": "idle_s", "idle-warn-s": "warn_before_s",
             "max-duration-s": "max_duration_s", "priority-min": "priority_min",
             "priority-max": "priority_max"}  # fmt: skip
    for name in unset or []:
        if name not in names:
            raise UserError(f"--unset {name}: not a setting; use one of {', '.join(names)}")
        changes[names[name]] = None
    _remote("a project's settings are").project_settings(changes, as_json)


exemption = typer.Typer(
    help="Exemptions from idle swap-out on a nestbed server (--server): asked by a member, "
    "granted or refused by a project leader.",
    no_args_is_help=True,
)


@exemption.command("ask")
def exemption_ask(
    name: Annotated[str, typer.Argument(help="Experiment name (on the server).")],
    reason: Annotated[str, typer.Option(help="Why it must stay swapped in.")],
    until: Annotated[
        str | None,
        typer.Option(
            help="Until when (ISO 8601, e.g. 2026-12-01T18:00Z; default: until it is swapped out)."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Ask a project leader to exempt an experiment from idle swap-out."""
    _remote("an exemption is").exemption_ask(name, reason, until, as_json)


@exemption.command("list")
def exemption_list(as_json: JsonOption = False) -> None:
    """List the project's exemptions, decided ones included."""
    _remote("an exemption is").exemption_list(as_json)


@exemption.command("grant")
def exemption_grant(
    exemption_id: Annotated[int, typer.Argument(help="Exemption id.")],
    note: Annotated[str, typer.Option(help="A word for the asker.")] = "",
) -> None:
    """Grant an exemption (a project leader)."""
    _remote("an exemption is").exemption_decide(exemption_id, "grant", note)


@exemption.command("refuse")
def exemption_refuse(
    exemption_id: Annotated[int, typer.Argument(help="Exemption id.")],
    note: Annotated[str, typer.Option(help="Why, for the asker.")] = "",
) -> None:
    """Refuse an exemption (a project leader)."""
    _remote("an exemption is").exemption_decide(exemption_id, "refuse", note)

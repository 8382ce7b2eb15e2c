"""A shared testbed's accounts in the store: users, projects and their members, API tokens,
which project owns each experiment, and the audit log.

``Accounts(store)`` works on an open ``Store`` (the same database, the same transactions);
the server is its only user. Names are checked here as the store checks experiment names;
who may do what is the server's business, not the store's.

Tokens are stored as the SHA-256 of the token, never the token itself: a token is 32 random
bytes (``secrets.token_urlsafe(32)``), so unlike a password it cannot be guessed from a
dictionary and needs no salt or slow hash; a plain hash makes a stolen database useless for
logging in while letting a request's token be found with one indexed lookup.

Whose a token is and a user's role in a project, asked at every request of a server, are
answered from a cache (``recent``): for ``recent.TTL_S`` at most, and forgotten at once by
every change to users, tokens, projects or members made through the same ``Accounts``.
"""

from __future__ import annotations

import builtins
import hashlib
import re
import secrets
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from nestbed.errors import InternalError, UserError
from nestbed.store.experiments import Store, insert_experiment, utc_now
from nestbed.store.recent import Recent
from nestbed.store.records import (
    AuditRecord,
    ExperimentRecord,
    Membership,
    OwnedExperiment,
    ProjectRecord,
    TokenRecord,
    UserRecord,
)
from nestbed.store.schema import (
    ACCOUNT_NAME_PATTERN,
    ROLES,
    api_tokens,
    audit_log,
    experiment_owners,
    experiments,
    memberships,
    projects,
    users,
)
from nestbed.store.states import State

TOKEN_PREFIX = "nbt_"
"""What every token starts with, so one pasted into the wrong place is recognisable."""
ACCOUNT_NAME_MAX = 32
SEPARATOR = "--"
"""Between a project's name and its experiment's in the stored name (``PROJECT--NAME``):
account names never contain it, so the stored name is unique on the machine."""

_ACCOUNT_NAME = re.compile(ACCOUNT_NAME_PATTERN)


def new_token() -> str:
    """A new API token: 32 random bytes, URL-safe, with ``TOKEN_PREFIX``."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What the store keeps of a token (see the module's docstring for why SHA-256 suffices)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def stored_name(project: str, name: str) -> str:
    """The name under which the store and the machine know experiment ``name`` of
    ``project``."""
    return f"{project}{SEPARATOR}{name}"


def users_text(text: str, project: str | None, experiment: str | None) -> str:
    """``text`` with the experiment's stored name (``PROJECT--NAME``, what the life cycle
    and the store say) replaced by its name in the project, the one its users know."""
    if project is None or experiment is None:
        return text
    return text.replace(stored_name(project, experiment), experiment)


def check_account_name(kind: str, name: str) -> None:
    """``UserError`` unless ``name`` may name a user or project (``kind`` says which)."""
    if len(name) > ACCOUNT_NAME_MAX or not _ACCOUNT_NAME.fullmatch(name):
        raise UserError(
            f"{kind} name {name!r} is not valid; use lower-case letters and digits with single "
            f"'-' between them, starting with a letter, at most {ACCOUNT_NAME_MAX} characters"
        )


class Accounts:
    """Users, projects, tokens, experiment ownership and the audit log of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.recent = Recent()  # tokens' users and members' roles (module docstring)

    # -- users and tokens --------------------------------------------------------------------

    def add_user(self, name: str, *, admin: bool = False) -> UserRecord:
        """A new user; ``UserError`` if the name is taken."""
        self.recent.clear()
        check_account_name("user", name)
        try:
            with self.store.transaction() as conn:
                conn.execute(users.insert().values(name=name, is_admin=admin, created_at=utc_now()))
                return _user(_one(conn, users, name, "user"))
        except sa.exc.IntegrityError as exc:
            raise UserError(f"a user named {name!r} already exists; choose another name") from exc

    def user(self, name: str) -> UserRecord | None:
        with self.store.reading() as conn:
            row = conn.execute(users.select().where(users.c.name == name)).first()
        return None if row is None else _user(row)

    def users(self) -> builtins.list[UserRecord]:
        with self.store.reading() as conn:
            rows = conn.execute(users.select().order_by(users.c.name)).all()
        return [_user(r) for r in rows]

    def add_token(self, user: str, label: str | None = None) -> tuple[TokenRecord, str]:
        """A new token for ``user``: its record and the token itself, which is not kept
        and cannot be shown again."""
        self.recent.clear()
        token = new_token()
        with self.store.transaction() as conn:
            owner = _one(conn, users, user, "user")
            result = conn.execute(
                api_tokens.insert().values(
                    user_id=owner.id,
                    token_sha256=token_hash(token),
                    label=label,
                    created_at=utc_now(),
                )
            )
            (token_id,) = result.inserted_primary_key or (None,)
            row = conn.execute(_tokens().where(api_tokens.c.id == token_id)).one()
        return _token(row), token

    def tokens(self, user: str) -> builtins.list[TokenRecord]:
        with self.store.reading() as conn:
            rows = conn.execute(_tokens().where(users.c.name == user)).all()
        return [_token(r) for r in rows]

    def revoke_token(self, user: str, token_id: int) -> None:
        """Removes a token of ``user``; ``UserError`` if the user has no such token."""
        self.recent.clear()
        with self.store.transaction() as conn:
            owner = _one(conn, users, user, "user")
            done = conn.execute(
                api_tokens.delete().where(
                    api_tokens.c.id == token_id, api_tokens.c.user_id == owner.id
                )
            )
        if done.rowcount != 1:
            raise UserError(f"user {user!r} has no token {token_id}; see their tokens listed")

    def user_for_token(self, token: str) -> UserRecord | None:
        """The user whose token this is, or None for an unknown (or revoked) token."""
        digest = token_hash(token)
        return self.recent.get(("token", digest),  # type: ignore[no-any-return]
                               lambda: self._user_for_hash(digest))  # fmt: skip

    def _user_for_hash(self, digest: str) -> UserRecord | None:
        with self.store.reading() as conn:
            row = conn.execute(
                users.select()
                .join(api_tokens, api_tokens.c.user_id == users.c.id)
                .where(api_tokens.c.token_sha256 == digest)
            ).first()
        return None if row is None else _user(row)

    # -- projects and members ----------------------------------------------------------------

    def add_project(self, name: str, leader: str) -> ProjectRecord:
        """A new project whose first member, ``leader``, leads it."""
        self.recent.clear()
        check_account_name("project", name)
        try:
            with self.store.transaction() as conn:
                head = _one(conn, users, leader, "user")
                now = utc_now()
                conn.execute(projects.insert().values(name=name, created_at=now))
                project = _one(conn, projects, name, "project")
                conn.execute(
                    memberships.insert().values(
                        project_id=project.id, user_id=head.id, role="leader", added_at=now
                    )
                )
                return _project(project)
        except sa.exc.IntegrityError as exc:
            raise UserError(
                f"a project named {name!r} already exists; choose another name"
            ) from exc

    def project(self, name: str) -> ProjectRecord | None:
        with self.store.reading() as conn:
            row = conn.execute(projects.select().where(projects.c.name == name)).first()
        return None if row is None else _project(row)

    def projects(self) -> builtins.list[ProjectRecord]:
        with self.store.reading() as conn:
            rows = conn.execute(projects.select().order_by(projects.c.name)).all()
        return [_project(r) for r in rows]

    def set_member(self, project: str, user: str, role: str = "member") -> Membership:
        """Adds ``user`` to ``project`` with ``role``, or changes their role."""
        self.recent.clear()
        if role not in ROLES:
            raise UserError(f"role {role!r} is not one of {', '.join(ROLES)}")
        with self.store.transaction() as conn:
            p = _one(conn, projects, project, "project")
            u = _one(conn, users, user, "user")
            where = (memberships.c.project_id == p.id, memberships.c.user_id == u.id)
            if conn.execute(memberships.select().where(*where)).first() is None:
                conn.execute(
                    memberships.insert().values(
                        project_id=p.id, user_id=u.id, role=role, added_at=utc_now()
                    )
                )
            else:
                conn.execute(memberships.update().where(*where).values(role=role))
            return _membership(conn.execute(_members().where(*where)).one())

    def remove_member(self, project: str, user: str) -> None:
        """Removes ``user`` from ``project``; its last leader stays."""
        self.recent.clear()
        with self.store.transaction() as conn:
            p = _one(conn, projects, project, "project")
            u = _one(conn, users, user, "user")
            leaders = conn.execute(
                memberships.select().where(
                    memberships.c.project_id == p.id, memberships.c.role == "leader"
                )
            ).all()
            if [row.user_id for row in leaders] == [u.id]:
                raise UserError(
                    f"{user!r} is the only leader of project {project!r}; make another member "
                    "leader first"
                )
            done = conn.execute(
                memberships.delete().where(
                    memberships.c.project_id == p.id, memberships.c.user_id == u.id
                )
            )
        if done.rowcount != 1:
            raise UserError(f"user {user!r} is not a member of project {project!r}")

    def members(self, project: str) -> builtins.list[Membership]:
        with self.store.reading() as conn:
            rows = conn.execute(_members().where(projects.c.name == project)).all()
        return [_membership(r) for r in rows]

    def memberships(self, user: str) -> builtins.list[Membership]:
        """The projects ``user`` belongs to, with their role in each."""
        with self.store.reading() as conn:
            rows = conn.execute(_members().where(users.c.name == user)).all()
        return [_membership(r) for r in rows]

    def role(self, project: str, user: str) -> str | None:
        """``user``'s role in ``project``, or None when they are not a member (or either
        does not exist)."""
        return self.recent.get(("role", project, user),  # type: ignore[no-any-return]
                               lambda: self._role(project, user))  # fmt: skip

    def _role(self, project: str, user: str) -> str | None:
        with self.store.reading() as conn:
            row = conn.execute(
                _members().where(projects.c.name == project, users.c.name == user)
            ).first()
        return None if row is None else row.role

    # -- experiments of projects -------------------------------------------------------------

    def create_experiment(
        self, project: str, name: str, creator: str | None, **definition: Any
    ) -> OwnedExperiment:
        """Stores a new experiment ``name`` of ``project`` (as ``Store.create_experiment``
        takes its definition) with its owner, in one transaction."""
        internal = stored_name(project, name)
        try:
            with self.store.transaction() as conn:
                p = _one(conn, projects, project, "project")
                u = None if creator is None else _one(conn, users, creator, "user")
                record = insert_experiment(conn, internal, **definition)
                conn.execute(
                    experiment_owners.insert().values(
                        experiment_id=record.id,
                        project_id=p.id,
                        creator_id=None if u is None else u.id,
                        name=name,
                    )
                )
        except sa.exc.IntegrityError as exc:
            raise UserError(
                f"project {project!r} already has an experiment named {name!r}; delete it or "
                "choose another name"
            ) from exc
        return OwnedExperiment(project=project, name=name, creator=creator, experiment=record)

    def experiment(self, project: str, name: str) -> OwnedExperiment | None:
        """Experiment ``name`` of ``project``, or None when the project has none by that name."""
        with self.store.reading() as conn:
            row = conn.execute(
                _owned().where(projects.c.name == project, experiment_owners.c.name == name)
            ).first()
        return None if row is None else _owned_record(row)

    def owner(self, stored: str) -> OwnedExperiment | None:
        """The project's experiment stored as ``stored``, or None for one no project owns."""
        with self.store.reading() as conn:
            row = conn.execute(_owned().where(experiments.c.name == stored)).first()
        return None if row is None else _owned_record(row)

    def experiments(self, project: str | None = None) -> builtins.list[OwnedExperiment]:
        """The experiments of ``project`` (of every project: None), by project and name."""
        query = _owned().order_by(projects.c.name, experiment_owners.c.name)
        if project is not None:
            query = query.where(projects.c.name == project)
        with self.store.reading() as conn:
            rows = conn.execute(query).all()
        return [_owned_record(r) for r in rows]

    # -- the audit log -----------------------------------------------------------------------

    def audit(
        self,
        actor: str | None,
        action: str,
        outcome: str,
        *,
        project: str | None = None,
        experiment: str | None = None,
    ) -> None:
        """Writes one row of the audit log, now."""
        if not action or not outcome:
            raise InternalError(f"audit row {action!r} with outcome {outcome!r}; this is a bug")
        with self.store.transaction() as conn:
            conn.execute(
                audit_log.insert().values(
                    at=utc_now(),
                    actor=actor,
                    action=action,
                    project=project,
                    experiment=experiment,
                    outcome=outcome,
                )
            )

    def audit_log(
        self,
        project: str | None = None,
        limit: int = 1000,
        *,
        experiment: str | None = None,
        by_server: bool = False,
        action: str | None = None,
    ) -> builtins.list[AuditRecord]:
        """The newest ``limit`` rows of the audit log, oldest first: of ``project`` only, of
        its ``experiment`` only, of the server's own doing only (``by_server``), of one
        ``action`` only, if asked."""
        query = audit_log.select().order_by(audit_log.c.id.desc()).limit(limit)
        if action is not None:
            query = query.where(audit_log.c.action == action)
        if project is not None:
            query = query.where(audit_log.c.project == project)
        if experiment is not None:
            query = query.where(audit_log.c.experiment == experiment)
        if by_server:
            query = query.where(audit_log.c.actor.is_(None))
        with self.store.reading() as conn:
            rows = conn.execute(query).all()
        return [AuditRecord(**dict(r._mapping)) for r in reversed(rows)]


def _one(conn: Connection, table: sa.Table, name: str, kind: str) -> sa.Row[Any]:
    row = conn.execute(table.select().where(table.c.name == name)).first()
    if row is None:
        raise UserError(f"there is no {kind} named {name!r}")
    return row


def _user(row: sa.Row[Any]) -> UserRecord:
    return UserRecord(
        id=row.id, name=row.name, is_admin=bool(row.is_admin), created_at=row.created_at
    )


def _project(row: sa.Row[Any]) -> ProjectRecord:
    return ProjectRecord(id=row.id, name=row.name, created_at=row.created_at)


def _tokens() -> sa.Select[Any]:
    return (
        sa.select(api_tokens, users.c.name.label("user_name"))
        .join(users, api_tokens.c.user_id == users.c.id)
        .order_by(api_tokens.c.id)
    )


def _token(row: sa.Row[Any]) -> TokenRecord:
    return TokenRecord(id=row.id, user=row.user_name, label=row.label, created_at=row.created_at)


def _members() -> sa.Select[Any]:
    return (
        sa.select(
            memberships, projects.c.name.label("project_name"), users.c.name.label("user_name")
        )
        .join(projects, memberships.c.project_id == projects.c.id)
        .join(users, memberships.c.user_id == users.c.id)
        .order_by(projects.c.name, users.c.name)
    )


def _membership(row: sa.Row[Any]) -> Membership:
    return Membership(
        project=row.project_name, user=row.user_name, role=row.role, added_at=row.added_at
    )


def _owned() -> sa.Select[Any]:
    return (
        sa.select(
            experiments,
            projects.c.name.label("owner_project"),
            experiment_owners.c.name.label("owner_name"),
            users.c.name.label("owner_creator"),
        )
        .join(experiment_owners, experiment_owners.c.experiment_id == experiments.c.id)
        .join(projects, experiment_owners.c.project_id == projects.c.id)
        .outerjoin(users, experiment_owners.c.creator_id == users.c.id)
    )


def _owned_record(row: sa.Row[Any]) -> OwnedExperiment:
    values = dict(row._mapping)
    owner = {k: values.pop(k) for k in ("owner_project", "owner_name", "owner_creator")}
    values["state"] = State(values["state"])
    record = ExperimentRecord(**values)
    return OwnedExperiment(
        project=owner["owner_project"],
        name=owner["owner_name"],
        creator=owner["owner_creator"],
        experiment=record,
    )

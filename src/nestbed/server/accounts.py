"""The API of users, tokens and projects: an admin adds users and projects, a project's
leader adds and removes its members, a user manages their own tokens; every change is
audited. A project the caller is not a member of is answered 404 (``auth``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParam

from nestbed.server import schemas
from nestbed.server.auth import NotFound, Who
from nestbed.store.records import Membership, TokenRecord, UserRecord
from nestbed.store.schema import ACCOUNT_NAME_PATTERN

router = APIRouter(prefix="/v1")

AccountName = Annotated[str, PathParam(pattern=f"^{ACCOUNT_NAME_PATTERN}$", max_length=32)]


def user_reply(user: UserRecord) -> schemas.User:
    return schemas.User(name=user.name, admin=user.is_admin, created_at=user.created_at)


def member_reply(m: Membership) -> schemas.Member:
    return schemas.Member(project=m.project, user=m.user, role=m.role)


def _token_reply(record: TokenRecord, token: str) -> schemas.NewTokenReply:
    return schemas.NewTokenReply(id=record.id, user=record.user, label=record.label,
                                 created_at=record.created_at, token=token)  # fmt: skip


# -- who am I ----------------------------------------------------------------------------------


@router.get("/whoami", tags=["users"])
def whoami(who: Who) -> schemas.Whoami:
    """The caller and their projects, with their role in each."""
    found = who.server.accounts.memberships(who.name)
    return schemas.Whoami(user=user_reply(who.user), projects=[member_reply(m) for m in found])


# -- users and tokens --------------------------------------------------------------------------


@router.post("/users", tags=["users"], status_code=201)
def add_user(body: schemas.NewUser, who: Who) -> schemas.NewTokenReply:
    """A new user (admins only) and their first token, shown this once."""
    with who.audited("user.add", experiment=None, project=None):
        who.admin("add users")
        accounts = who.server.accounts
        accounts.add_user(body.name, admin=body.admin)
        record, token = accounts.add_token(body.name, "first")
    return _token_reply(record, token)


@router.get("/users", tags=["users"])
def list_users(who: Who) -> list[schemas.User]:
    """Every user (admins only)."""
    who.admin("list users")
    return [user_reply(u) for u in who.server.accounts.users()]


@router.post("/users/{user}/tokens", tags=["users"], status_code=201)
def add_token(user: AccountName, body: schemas.NewToken, who: Who) -> schemas.NewTokenReply:
    """A new token of ``user`` (oneself, or any user for an admin), shown this once."""
    with who.audited("token.add"):
        who.self_or_admin(user)
        record, token = who.server.accounts.add_token(user, body.label)
    return _token_reply(record, token)


@router.get("/users/{user}/tokens", tags=["users"])
def list_tokens(user: AccountName, who: Who) -> list[schemas.Token]:
    """The tokens of ``user`` (never the tokens themselves: the server keeps only hashes)."""
    who.self_or_admin(user)
    return [schemas.Token(id=t.id, user=t.user, label=t.label, created_at=t.created_at)
            for t in who.server.accounts.tokens(user)]  # fmt: skip


@router.delete("/users/{user}/tokens/{token_id}", tags=["users"])
def revoke_token(user: AccountName, token_id: int, who: Who) -> dict[str, bool]:
    """Revokes one of ``user``'s tokens: it stops working at once."""
    with who.audited("token.revoke"):
        who.self_or_admin(user)
        who.server.accounts.revoke_token(user, token_id)
    return {"ok": True}


# -- projects ----------------------------------------------------------------------------------


def _project_reply(who: Who, name: str) -> schemas.Project:
    project = who.server.accounts.project(name)
    if project is None:
        raise NotFound(f"there is no project {name!r}")
    members = [member_reply(m) for m in who.server.accounts.members(name)]
    return schemas.Project(name=project.name, created_at=project.created_at, members=members)


@router.post("/projects", tags=["projects"], status_code=201)
def add_project(body: schemas.NewProject, who: Who) -> schemas.Project:
    """A new project led by ``leader`` (admins only)."""
    with who.audited("project.add", project=body.name):
        who.admin("add projects")
        who.server.accounts.add_project(body.name, body.leader)
    return _project_reply(who, body.name)


@router.get("/projects", tags=["projects"])
def list_projects(who: Who) -> list[schemas.Project]:
    """The caller's projects (every project, for an admin)."""
    accounts = who.server.accounts
    if who.user.is_admin:
        names = [p.name for p in accounts.projects()]
    else:
        names = [m.project for m in accounts.memberships(who.name)]
    return [_project_reply(who, n) for n in names]


@router.get("/projects/{project}", tags=["projects"])
def show_project(project: AccountName, who: Who) -> schemas.Project:
    """A project and its members (members and admins only; 404 for anyone else)."""
    who.role(project)
    return _project_reply(who, project)


@router.put("/projects/{project}/members/{user}", tags=["projects"])
def set_member(
    project: AccountName, user: AccountName, body: schemas.MemberRole, who: Who
) -> schemas.Member:
    """Adds ``user`` to the project, or changes their role (its leaders and admins only)."""
    with who.audited("member.set", project=project) as entry:
        who.lead(project)
        if who.server.accounts.user(user) is None:
            raise NotFound(f"there is no user {user!r}; an admin adds users")
        member = who.server.accounts.set_member(project, user, body.role)
        entry.outcome = f"ok: {user} is {body.role}"
    return member_reply(member)


@router.delete("/projects/{project}/members/{user}", tags=["projects"])
def remove_member(project: AccountName, user: AccountName, who: Who) -> dict[str, bool]:
    """Removes ``user`` from the project (its leaders and admins only)."""
    with who.audited("member.remove", project=project) as entry:
        who.lead(project)
        who.server.accounts.remove_member(project, user)
        entry.outcome = f"ok: {user} removed"
    return {"ok": True}


@router.get("/projects/{project}/audit", tags=["projects"])
def project_audit(project: AccountName, who: Who, limit: int = 1000) -> list[schemas.AuditRow]:
    """The project's audit log, oldest first (its leaders and admins only)."""
    who.lead(project, "read its audit log")
    rows = who.server.accounts.audit_log(project, limit=max(1, min(limit, 10000)))
    return [_audit(r) for r in rows]


@router.get("/audit", tags=["server"])
def audit(who: Who, limit: int = 1000) -> list[schemas.AuditRow]:
    """The whole audit log, oldest first (admins only)."""
    who.admin("read the whole audit log")
    return [_audit(r) for r in who.server.accounts.audit_log(limit=max(1, min(limit, 10000)))]


def _audit(r: object) -> schemas.AuditRow:
    return schemas.AuditRow.model_validate(r, from_attributes=True)

"""A shared testbed's accounts in the store: tokens kept only as hashes, projects with
leaders and members, experiments owned by projects under unique stored names, the audit
log; on SQLite and PostgreSQL alike."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from nestbed.errors import UserError
from nestbed.store import Store
from nestbed.store.accounts import Accounts, stored_name, token_hash

DEFINITION = dict(source_text="x", source_format="yaml", source_file="x.yaml", ir_json="{}")


@pytest.fixture
def accounts(store: Store) -> Accounts:
    return Accounts(store)


def test_a_token_finds_its_user_and_only_its_hash_is_stored(accounts: Accounts) -> None:
    accounts.add_user("ada")
    record, token = accounts.add_token("ada", "laptop")
    assert token.startswith("nbt_") and len(token) > 40
    assert accounts.user_for_token(token).name == "ada"
    assert accounts.user_for_token(token + "x") is None
    with accounts.store.engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT token_sha256 FROM api_tokens")).scalars().all()
    assert stored == [token_hash(token)] and token not in stored[0]
    accounts.revoke_token("ada", record.id)
    assert accounts.user_for_token(token) is None
    assert accounts.tokens("ada") == []


def test_names_are_checked_and_unique(accounts: Accounts) -> None:
    accounts.add_user("ada")
    with pytest.raises(UserError, match="already exists"):
        accounts.add_user("ada")
    for bad in ("Ada", "a--b", "-a", "a" * 33, "a b"):
        with pytest.raises(UserError, match="is not valid"):
            accounts.add_user(bad)


def test_a_project_has_its_leader_and_the_last_leader_stays(accounts: Accounts) -> None:
    for name in ("ada", "bob"):
        accounts.add_user(name)
    accounts.add_project("net", leader="ada")
    accounts.set_member("net", "bob")
    assert accounts.role("net", "ada") == "leader" and accounts.role("net", "bob") == "member"
    assert [m.project for m in accounts.memberships("bob")] == ["net"]
    with pytest.raises(UserError, match="only leader"):
        accounts.remove_member("net", "ada")
    accounts.remove_member("net", "bob")
    assert accounts.role("net", "bob") is None
    with pytest.raises(UserError, match="role 'boss'"):
        accounts.set_member("net", "bob", "boss")


def test_experiments_belong_to_projects_under_unique_stored_names(accounts: Accounts) -> None:
    accounts.add_user("ada")
    accounts.add_project("net", leader="ada")
    accounts.add_project("web", leader="ada")
    a = accounts.create_experiment("net", "line", "ada", **DEFINITION)
    b = accounts.create_experiment("web", "line", "ada", **DEFINITION)
    assert a.experiment.name == stored_name("net", "line") == "net--line"
    assert b.experiment.name == "web--line"
    with pytest.raises(UserError, match="already has an experiment named 'line'"):
        accounts.create_experiment("net", "line", "ada", **DEFINITION)
    assert [e.experiment.name for e in accounts.experiments("net")] == ["net--line"]
    assert accounts.experiment("web", "line").creator == "ada"
    assert accounts.experiment("web", "nope") is None
    accounts.store.delete("net--line")  # the owner row goes with the experiment
    assert accounts.experiments("net") == []


def test_the_audit_log_keeps_rows_in_order_per_project(accounts: Accounts) -> None:
    accounts.audit("ada", "create", "ok", project="net", experiment="line")
    accounts.audit("bob", "swapin", "refused: busy", project="web", experiment="x")
    accounts.audit(None, "reconcile", "settled", project="net", experiment="line")
    rows = accounts.audit_log("net")
    assert [(r.actor, r.action, r.outcome) for r in rows] == [
        ("ada", "create", "ok"),
        (None, "reconcile", "settled"),
    ]
    assert len(accounts.audit_log()) == 3 and rows[0].at <= rows[1].at

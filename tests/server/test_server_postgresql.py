"""The team setup: `nestbed serve` on a real PostgreSQL store (a throwaway cluster, see
pg_helpers) keeps accounts, experiments, states and the audit log across a restart, and
projects stay apart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from server_helpers import LINE, wait_for

from nestbed.errors import UserError
from pg_helpers import fresh_pg_database

NET = "/v1/projects/net/experiments"


@pytest.fixture
def serve_store(pg_server: str) -> Iterator[str]:
    with fresh_pg_database(pg_server) as url:
        yield url


def test_a_server_on_postgresql_swaps_audits_and_remembers_across_a_restart(served, people):
    assert served.store.startswith("postgresql")
    ada = served.client(people["ada"])
    ada.request("POST", NET, {"file_name": "pg.yaml", "text": LINE})
    ada.request("POST", f"{NET}/pg/swapin")
    assert wait_for(ada, f"{NET}/pg", "swapin")["state"] == "active"
    ada.request("POST", f"{NET}/pg/swapout")
    assert wait_for(ada, f"{NET}/pg", "swapout")["state"] == "swapped"
    assert served.stop() is not None
    served.start()
    ada = served.client(people["ada"])  # the same token, read back from PostgreSQL
    assert [e["name"] for e in ada.request("GET", NET)] == ["pg"]
    assert ada.request("GET", f"{NET}/pg")["state"] == "swapped"
    actions = [row["action"] for row in ada.request("GET", "/v1/projects/net/audit")]
    assert {"create", "swapin", "swapout"} <= set(actions)
    with pytest.raises(UserError, match="there is no project 'net'"):
        served.client(people["bob"]).request("GET", f"{NET}/pg")

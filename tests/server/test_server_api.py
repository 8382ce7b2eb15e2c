"""The server's API against a real `nestbed serve` process: tokens, project isolation,
experiment files parsed with file:line errors, swaps reaching the back end, the audit log."""

from __future__ import annotations

import hashlib
import http.client
import json
import sqlite3
import urllib.error
import urllib.request

import pytest
from server_helpers import LINE, wait_for

from nestbed.errors import SpecError, UserError

NET = "/v1/projects/net/experiments"
WEB = "/v1/projects/web/experiments"


def _status(url: str, token: str | None = None, method: str = "GET", data: bytes | None = None):
    request = urllib.request.Request(url, method=method, data=data)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _line(name: str = "line") -> dict:
    return {"file_name": f"{name}.yaml", "text": LINE}


def test_every_call_needs_a_known_token_and_tokens_are_stored_hashed(served, people):
    assert _status(served.url + "/v1/whoami") == (
        401, {"detail": "this API needs a bearer token (Authorization: Bearer TOKEN)"})  # fmt: skip
    code, reply = _status(served.url + "/v1/whoami", people["ada"] + "x")
    assert code == 401 and "not known" in reply["detail"]
    code, reply = _status(served.url + "/v1/whoami", people["ada"])
    assert code == 200 and reply["projects"] == [
        {"project": "net", "user": "ada", "role": "leader"}
    ]
    with sqlite3.connect(served.db) as db:
        stored = {row[0] for row in db.execute("SELECT token_sha256 FROM api_tokens")}
        dump = "\n".join(db.iterdump())
    for token in [served.admin_token, *people.tokens.values()]:
        assert hashlib.sha256(token.encode()).hexdigest() in stored
        assert token not in dump and token.removeprefix("nbt_") not in dump


def test_a_revoked_token_stops_working_at_once(served, people):
    bob = served.client(people["bob"])
    new = bob.request("POST", "/v1/users/bob/tokens", {"label": "ci"})
    assert served.client(new["token"]).request("GET", "/v1/whoami")["user"]["name"] == "bob"
    assert [t["label"] for t in bob.request("GET", "/v1/users/bob/tokens")] == ["first", "ci"]
    bob.request("DELETE", f"/v1/users/bob/tokens/{new['id']}")
    with pytest.raises(UserError, match="refused the token"):
        served.client(new["token"]).request("GET", "/v1/whoami")
    with pytest.raises(UserError, match="only an admin"):
        bob.request("POST", "/v1/users/ada/tokens", {})


def test_the_openapi_schema_is_published(served):
    code, schema = _status(served.url + "/openapi.json")
    assert code == 200 and schema["info"]["title"] == "nestbed"
    assert "/v1/projects/{project}/experiments/{name}/swapin" in schema["paths"]
    assert "HTTPBearer" in schema["components"]["securitySchemes"]


def test_a_member_of_one_project_never_sees_another_projects_experiments(served, people):
    ada, bob, cy = (served.client(people[n]) for n in ("ada", "bob", "cy"))
    ada.request("POST", NET, _line())
    bob.request("POST", WEB, _line())  # the same name in another project is another experiment
    assert [(e["project"], e["stored_name"]) for e in cy.request("GET", NET)] == [
        ("net", "net--line")]  # fmt: skip
    assert [e["stored_name"] for e in bob.request("GET", WEB)] == ["web--line"]
    for method, path in (
        ("GET", NET), ("GET", NET + "/line"), ("GET", NET + "/line/status"),
        ("POST", NET + "/line/swapin"), ("POST", NET + "/line/swapout"),
        ("DELETE", NET + "/line"), ("GET", "/v1/projects/net"),
    ):  # fmt: skip
        code, reply = _status(served.url + path, people["bob"], method)
        assert code == 404, (method, path, reply)
        # ... and the same answer as for a project that does not exist at all:
        missing = path.replace("/projects/net", "/projects/nope")
        assert _status(served.url + missing, people["bob"], method)[0] == 404
    assert [p["name"] for p in bob.request("GET", "/v1/projects")] == ["web"]
    assert ada.request("GET", NET + "/line")["state"] == "defined"  # untouched by bob
    # Only a leader changes members; a member of another project cannot even see it.
    with pytest.raises(UserError, match="only a leader"):
        cy.request("PUT", "/v1/projects/net/members/bob", {"role": "member"})
    with pytest.raises(UserError, match="there is no project 'net'"):
        bob.request("PUT", "/v1/projects/net/members/bob", {"role": "leader"})
    # A member removed by the leader sees the project no more.
    ada.request("DELETE", "/v1/projects/net/members/cy")
    assert _status(served.url + NET + "/line", people["cy"])[0] == 404
    assert cy.request("GET", "/v1/whoami")["projects"] == []


def test_define_replaces_a_definition_only_while_not_swapped_in(served, people):
    ada = served.client(people["ada"])
    code, made = _status(served.url + NET + "/line", people["ada"], "PUT",
                         json.dumps(_line()).encode())  # fmt: skip
    assert code == 201 and made["state"] == "defined"
    three = LINE.replace(
        "nodes: [{name: a}, {name: b}]", "nodes: [{name: a}, {name: b}, {name: c}]"
    )
    replaced = ada.request("PUT", NET + "/line", {"file_name": "line.yaml", "text": three})
    assert replaced["source_sha256"] != made["source_sha256"]
    assert [n["name"] for n in ada.request("GET", NET + "/line")["ir"]["nodes"]] == ["a", "b", "c"]
    ada.request("POST", NET + "/line/swapin")
    assert wait_for(ada, NET + "/line", "swapin")["state"] == "active"
    with pytest.raises(UserError, match="its definition cannot be changed"):
        ada.request("PUT", NET + "/line", _line())
    ada.request("POST", NET + "/line/swapout")
    found = wait_for(ada, NET + "/line", "swapout")
    assert found["state"] == "swapped", found


def test_a_bad_file_is_422_with_its_file_and_line(served, people):
    body = {"file_name": "bad.yaml",
            "text": "nodes: [{name: a}, {name: b}]\nlinks:\n  - {members: [a, b], bandwidth: 10MB}\n"}  # fmt: skip
    code, reply = _status(served.url + NET, people["ada"], "POST", json.dumps(body).encode())
    assert code == 422
    assert reply["problems"][0]["file"] == "bad.yaml" and reply["problems"][0]["line"] == 3
    assert reply["detail"].startswith("bad.yaml:3: link link0: bandwidth '10MB'")
    ns = {"file_name": "bad.ns", "text": "set ns [new Simulator]\nset a [$ns node]\n"
          "set b [$ns node]\n$ns duplex-link $a $b 10MB 5ms DropTail\n$ns run\n"}  # fmt: skip
    with pytest.raises(SpecError) as found:
        served.client(people["ada"]).request("POST", NET, ns)
    assert [(p.file, p.line) for p in found.value.problems][:1] == [("bad.ns", 4)]
    assert served.client(people["ada"]).request("GET", NET) == []  # nothing was stored


def test_requests_are_validated_before_anything_runs(served, people):
    ada = served.client(people["ada"])
    for bad in ({"file_name": "../x.yaml", "text": LINE}, {"file_name": "x.sh", "text": "ls"},
                {"file_name": "x.yaml", "text": LINE, "name": "a b"},
                {"file_name": "x.yaml", "text": LINE, "surprise": 1}):  # fmt: skip
        code, _ = _status(served.url + NET, people["ada"], "POST", json.dumps(bad).encode())
        assert code == 422, bad
    # A body announced larger than the limit is refused before it is sent (not read at all).
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    connection.putrequest("POST", NET)
    connection.putheader("Authorization", f"Bearer {people['ada']}")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(3 << 20))
    connection.endheaders()
    reply = connection.getresponse()
    assert reply.status == 413 and "larger than the limit" in json.loads(reply.read())["detail"]
    connection.close()
    assert ada.request("GET", NET) == []


def test_swap_in_and_out_through_the_api_reach_the_back_end_and_are_audited(served, people):
    ada, cy = served.client(people["ada"]), served.client(people["cy"])
    ada.request("POST", NET, _line())
    accepted = cy.request("POST", NET + "/line/swapin")  # any member may act
    assert accepted["operation"]["kind"] == "swapin" and accepted["stored_name"] == "net--line"
    found = wait_for(cy, NET + "/line", "swapin")
    assert found["state"] == "active", found
    assert found["live"]["experiment"] == "net--line"
    assert [n["node"] for n in found["live"]["nodes"]] == ["a", "b"]
    with pytest.raises(UserError, match="cannot be deleted"):
        ada.request("DELETE", NET + "/line")
    ada.request("POST", NET + "/line/swapout")
    assert wait_for(ada, NET + "/line", "swapout")["state"] == "swapped"
    journal = [json.loads(x) for x in (served.fake_root / "journal.jsonl").read_text().splitlines()]
    assert [(e["op"], e.get("experiment")) for e in journal if e["op"] in ("swap_in", "swap_out")] == [
        ("swap_in", "net--line"), ("swap_out", "net--line")]  # fmt: skip
    runs = ada.request("GET", NET + "/line")["runs"]
    assert [r["outcome"] for r in runs] == ["completed"]
    assert runs[0]["results_dir"].startswith(str(served.root / "results" / "net" / "line-"))
    ada.request("DELETE", NET + "/line")
    audit = ada.request("GET", "/v1/projects/net/audit")
    rows = [(r["actor"], r["action"], r["experiment"], r["outcome"]) for r in audit]
    assert rows == [
        ("root", "project.add", None, "ok"),
        ("ada", "member.set", None, "ok: cy is member"),
        ("ada", "create", "line", "ok"),
        ("cy", "swapin", "line", "accepted"),
        ("cy", "swapin.end", "line", "done"),
        ("ada", "delete", "line", rows[5][3]),
        ("ada", "swapout", "line", "accepted"),
        ("ada", "swapout.end", "line", "done"),
        ("ada", "delete", "line", "ok"),
    ]
    assert rows[5][3].startswith("refused: experiment 'line' is active")
    with pytest.raises(UserError, match="only a leader"):
        cy.request("GET", "/v1/projects/net/audit")


def test_a_second_operation_while_one_runs_is_refused(served, people):
    ada = served.client(people["ada"])
    ada.request("POST", NET, _line())
    ada.request("POST", NET + "/line/swapin")
    with pytest.raises(UserError, match=r"busy with a swapin|is swapping-in|is active"):
        ada.request("POST", NET + "/line/swapin")
    wait_for(ada, NET + "/line", "swapin")
    ada.request("POST", NET + "/line/swapout")
    assert wait_for(ada, NET + "/line", "swapout")["state"] == "swapped"


def test_a_malformed_request_on_a_visible_experiment_is_audited_and_errors_say_its_name(
    served, people
):
    ada = served.client(people["ada"])
    ada.request("POST", NET, _line())
    code, reply = _status(served.url + NET + "/line/swapin", people["ada"], "POST",
                          json.dumps({"linktest": 9}).encode())  # fmt: skip
    assert code == 422
    assert reply["detail"].startswith("the request is malformed: linktest: ")
    code, _ = _status(served.url + NET + "/line/swapin", people["bob"], "POST",
                      json.dumps({"linktest": 9}).encode())  # fmt: skip
    assert code == 422  # bob is not in net: refused alike, but net's log is not his to write
    ada.request("POST", NET + "/line/swapin")
    wait_for(ada, NET + "/line", "swapin")
    with pytest.raises(UserError) as again:
        ada.request("POST", NET + "/line/swapin")
    assert "experiment 'line' is active" in str(again.value) and "net--" not in str(again.value)
    rows = [(r["actor"], r["action"], r["experiment"], r["outcome"])
            for r in ada.request("GET", "/v1/projects/net/audit")]  # fmt: skip
    swapins = [r for r in rows if r[1] == "swapin"]
    assert [r[:3] for r in swapins] == [("ada", "swapin", "line")] * 3
    assert swapins[0][3].startswith("refused: the request is malformed: linktest: ")
    assert swapins[1][3] == "accepted"
    assert swapins[2][3].startswith("refused: ") and "net--" not in swapins[2][3]
    assert not [r for r in rows if r[0] == "bob"]
    ada.request("POST", NET + "/line/swapout")
    wait_for(ada, NET + "/line", "swapout")

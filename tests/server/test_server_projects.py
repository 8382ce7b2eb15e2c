"""A project's policy settings and idle-swap exemptions through a running server: members
read, leaders change and decide, others see nothing, every step audited, the CLI too."""

from __future__ import annotations

import json

import pytest
from server_helpers import LINE

from nestbed.errors import UserError

SETTINGS = "/v1/projects/net/settings"
NET = "/v1/projects/net/experiments"


def test_settings_default_to_emulabs_and_a_leader_changes_them(served, people):
    ada, cy, bob = (served.client(people[n]) for n in ("ada", "cy", "bob"))
    found = cy.request("GET", SETTINGS)  # a member reads them
    assert (found["idle_s"], found["warn_before_s"], found["max_duration_s"]) == (
        4 * 3600, 1800, 16 * 3600)  # fmt: skip
    assert found["own"] == {"idle_s": None, "warn_before_s": None, "max_duration_s": None,
                            "priority_min": None, "priority_max": None}  # fmt: skip
    with pytest.raises(UserError, match="only a leader of project 'net' may change its settings"):
        cy.request("PATCH", SETTINGS, {"idle_s": 60})
    with pytest.raises(UserError, match="there is no project 'net'"):
        bob.request("GET", SETTINGS)  # not a member: no such project, as far as bob knows
    changed = ada.request("PATCH", SETTINGS, {"idle_s": 7200, "max_duration_s": 0})
    assert (changed["idle_s"], changed["max_duration_s"]) == (7200, None)  # 0: no maximum
    assert changed["updated_by"] == "ada"
    again = ada.request("PATCH", SETTINGS, {"idle_s": None, "warn_before_s": 600})
    assert (again["idle_s"], again["warn_before_s"], again["max_duration_s"]) == (
        4 * 3600,
        600,
        None,
    )
    with pytest.raises(UserError, match="warn_before_s must be at least 0 and below idle_s"):
        ada.request("PATCH", SETTINGS, {"idle_s": 300})  # below the warning it keeps
    with pytest.raises(UserError, match=r"priority_min \(3\) must not be above priority_max"):
        ada.request("PATCH", SETTINGS, {"priority_min": 3, "priority_max": 1})
    with pytest.raises(UserError, match="surprise"):
        ada.request("PATCH", SETTINGS, {"surprise": 1})
    audit = [(r["actor"], r["action"], r["outcome"].split(":")[0])
             for r in ada.request("GET", "/v1/projects/net/audit") if r["action"] == "settings.set"]  # fmt: skip
    assert audit == [("cy", "settings.set", "denied"), ("ada", "settings.set", "ok"),
                     ("ada", "settings.set", "ok"), ("ada", "settings.set", "refused"),
                     ("ada", "settings.set", "refused"),
                     ("ada", "settings.set", "refused")]  # the malformed one too  # fmt: skip


def test_the_cli_shows_and_changes_a_projects_settings(served, people):
    env = {"NESTBED_SERVER": served.url, "NESTBED_TOKEN": people["ada"]}
    shown = served.nestbed("project", "settings", **env)
    assert shown.returncode == 0, shown.stderr
    assert (
        "idle swap-out after 14400 s (server default), warned 1800 s (server default)"
        in shown.stdout
    )
    changed = served.nestbed("project", "settings", "--idle-s", "3600", "--priority-max", "10",
                             "--json", **env)  # fmt: skip
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout)["own"]["idle_s"] == 3600
    unset = served.nestbed("project", "settings", "--unset", "idle-s", **env)
    assert "idle swap-out after 14400 s (server default)" in unset.stdout
    assert "batch priorities: to 10" in unset.stdout
    member = served.nestbed("project", "settings", "--idle-s", "60",
                            **{**env, "NESTBED_TOKEN": people["cy"]})  # fmt: skip
    assert member.returncode != 0
    assert "only a leader of project 'net' may change its settings" in member.stderr


def test_a_member_asks_for_an_exemption_and_a_leader_grants_or_refuses_it(served, people):
    ada, cy, bob = (served.client(people[n]) for n in ("ada", "cy", "bob"))
    ada.request("POST", NET, {"file_name": "line.yaml", "text": LINE})
    asked = cy.request("POST", NET + "/line/exemption", {"reason": "a week-long capture"})
    assert (asked["state"], asked["asked_by"], asked["in_force"]) == ("asked", "cy", False)
    with pytest.raises(UserError, match=r"already has exemption 1 waiting"):
        cy.request("POST", NET + "/line/exemption", {"reason": "again"})
    with pytest.raises(UserError, match="only a leader of project 'net' may grant exemptions"):
        cy.request("POST", f"/v1/projects/net/exemptions/{asked['id']}/grant")
    with pytest.raises(UserError, match="there is no project 'net'"):
        bob.request("POST", f"/v1/projects/net/exemptions/{asked['id']}/grant")
    granted = ada.request("POST", f"/v1/projects/net/exemptions/{asked['id']}/grant",
                          {"note": "until Friday"})  # fmt: skip
    assert (granted["state"], granted["decided_by"], granted["in_force"]) == (
        "granted",
        "ada",
        True,
    )
    with pytest.raises(UserError, match="was already granted"):
        ada.request("POST", f"/v1/projects/net/exemptions/{asked['id']}/refuse")
    with pytest.raises(UserError, match="is already past"):
        cy.request("POST", NET + "/line/exemption",
                   {"reason": "late", "until": "2000-01-01T00:00:00Z"})  # fmt: skip
    env = {"NESTBED_SERVER": served.url, "NESTBED_TOKEN": people["cy"]}
    again = served.nestbed("exemption", "ask", "line", "--reason", "one more day", "--until",
                           "2099-01-01T00:00:00Z", **env)  # fmt: skip
    assert again.returncode == 0 and "asked for exemption 2 of experiment line" in again.stdout
    refused = served.nestbed("exemption", "refuse", "2", "--note", "one is enough",
                             **{**env, "NESTBED_TOKEN": people["ada"]})  # fmt: skip
    assert refused.returncode == 0, refused.stderr
    assert "2: line until 2099-01-01T00:00:00: refused by ada (one is enough)" in refused.stdout
    listed = served.nestbed("exemption", "list", **env).stdout
    assert (
        "1: line: granted by ada (until Friday), in force; asked by cy: a week-long capture"
        in listed
    )
    rows = [(r["actor"], r["action"], r["experiment"], r["outcome"].split(":")[0])
            for r in ada.request("GET", "/v1/projects/net/audit")
            if r["action"].startswith("exemption.")]  # fmt: skip
    assert rows == [
        ("cy", "exemption.ask", "line", "ok"), ("cy", "exemption.ask", "line", "refused"),
        ("cy", "exemption.grant", "line", "denied"), ("bob", "exemption.grant", None, "denied"),
        ("ada", "exemption.grant", "line", "ok"),
        ("ada", "exemption.refuse", "line", "refused"), ("cy", "exemption.ask", "line", "refused"),
        ("cy", "exemption.ask", "line", "ok"), ("ada", "exemption.refuse", "line", "ok"),
    ]  # fmt: skip

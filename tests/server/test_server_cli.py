"""The command line against a server (`--server`, NESTBED_SERVER and a token from
NESTBED_TOKEN or the token file): the same commands, the server's experiments, its errors
as one line each; the server machine's account commands; local mode untouched."""

from __future__ import annotations

import json

from server_helpers import LINE


def test_the_cli_works_on_the_server_with_the_token_from_env_or_file(served, people):
    line = served.root / "line.yaml"
    line.write_text(LINE)
    env = {"NESTBED_SERVER": served.url, "NESTBED_TOKEN": people["ada"]}
    made = served.nestbed("create", str(line), **env)
    assert made.returncode == 0, made.stderr
    assert f"created experiment line in project net on {served.url}" in made.stdout
    listed = served.nestbed("list", "--json", **env)
    assert [(e["name"], e["state"]) for e in json.loads(listed.stdout)] == [("line", "defined")]

    swapped = served.nestbed("swapin", "line", **env)
    assert swapped.returncode == 0, swapped.stderr
    assert "experiment line is active" in swapped.stdout
    status = served.nestbed("status", "--json", "line", **env)
    assert json.loads(status.stdout)["live"]["experiment"] == "net--line"
    text = served.nestbed("status", "line", **env)
    assert text.returncode == 0 and "link0" in text.stdout, text.stderr
    out = served.nestbed("swapout", "line", **env)
    assert out.returncode == 0 and "experiment line is swapped" in out.stdout, out.stderr
    shown = served.nestbed("show", "line", **env)
    assert shown.returncode == 0 and "line: swapped (from line.yaml" in shown.stdout

    # The token from the file under XDG_CONFIG_HOME, the server from --server.
    config = served.root / "config"
    (config / "nestbed").mkdir(parents=True)
    (config / "nestbed" / "token").write_text(people["bob"] + "\n")
    bob = {"XDG_CONFIG_HOME": str(config)}
    theirs = served.nestbed("--server", served.url, "--project", "net", "show", "line", **bob)
    assert theirs.returncode == 2
    assert (
        theirs.stderr.strip() == "error: there is no project 'net'; see yours with GET /v1/projects"
    )
    assert json.loads(served.nestbed("--server", served.url, "list", "--json", **bob).stdout) == []

    deleted = served.nestbed("delete", "line", **env)
    assert deleted.returncode == 0 and "deleted experiment line of project net" in deleted.stdout


def test_a_bad_file_or_token_is_one_line_each_and_local_mode_is_untouched(served, people):
    bad = served.root / "bad.yaml"
    bad.write_text(
        "nodes: [{name: a}, {name: b}]\nlinks:\n  - {members: [a, b], bandwidth: 10MB}\n"
    )
    env = {"NESTBED_SERVER": served.url, "NESTBED_TOKEN": people["ada"]}
    found = served.nestbed("create", str(bad), **env)
    assert found.returncode == 2
    assert found.stderr.startswith("error: bad.yaml:3: link link0: bandwidth '10MB'")
    refused = served.nestbed("list", NESTBED_SERVER=served.url, NESTBED_TOKEN="nbt_wrong")
    assert refused.returncode == 2 and "refused the token" in refused.stderr
    down = served.nestbed("list", NESTBED_SERVER="http://127.0.0.1:9", NESTBED_TOKEN="x")
    assert down.returncode == 3 and "cannot reach the nestbed server" in down.stderr
    # Without a server the commands work on this machine's store, as before.
    local = served.nestbed("list", "--json")
    assert local.returncode == 0 and json.loads(local.stdout) == []


def test_the_server_machines_account_commands(served):
    store = ["--store", str(served.db)]
    made = served.nestbed("server", "user-add", "dan", *store)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    assert served.nestbed("server", "project-add", "lab", "--leader", "dan", *store).returncode == 0
    assert served.client(token).request("GET", "/v1/whoami")["projects"] == [
        {"project": "lab", "user": "dan", "role": "leader"}]  # fmt: skip
    users = json.loads(served.nestbed("server", "users", "--json", *store).stdout)
    assert {u["name"]: u["projects"] for u in users} == {"dan": {"lab": "leader"}, "root": {}}


def test_short_commands_do_not_load_the_server_s_web_stack(served, people):
    """Issue 18's startup time: FastAPI and uvicorn load only for `nestbed serve`."""
    env = {"NESTBED_SERVER": served.url, "NESTBED_TOKEN": people["ada"]}
    for mode in ({}, env):
        done = served.nestbed("list", PYTHONPROFILEIMPORTTIME="1", **mode)
        assert done.returncode == 0, done.stderr
        imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                    if line.startswith("import time:")}  # fmt: skip
        assert "nestbed.cli" in imported
        web = {m for m in imported if m.split(".")[0] in ("fastapi", "uvicorn", "starlette")}
        assert web == set(), mode


def test_a_whole_run_on_the_server_from_a_file(served, people):
    line = served.root / "line.yaml"
    line.write_text(LINE)
    env = {"NESTBED_SERVER": served.url, "NESTBED_TOKEN": people["cy"]}
    done = served.nestbed("run", str(line), "--duration", "0.5", **env)
    assert done.returncode == 0, done.stderr
    assert "of experiment line: completed; results on the server in " in done.stdout
    assert str(served.root / "results" / "net" / "line-") in done.stdout
    refused = served.nestbed("run", "line", "--keep", **env)
    assert refused.returncode == 2 and "--keep, --results" in refused.stderr


def test_an_event_is_sent_through_the_server(served, people):
    line = served.root / "line.yaml"
    line.write_text(LINE)
    env = {"NESTBED_SERVER": served.url, "NESTBED_TOKEN": people["ada"]}
    assert served.nestbed("create", str(line), **env).returncode == 0
    early = served.nestbed("event", "line", "link0", "down", **env)
    assert early.returncode == 2
    assert early.stderr.strip() == (
        "error: experiment 'line' is defined, not swapped in; swap it in first"
    )
    assert served.nestbed("swapin", "line", **env).returncode == 0
    try:
        down = served.nestbed("event", "line", "link0", "down", **env)
        assert down.returncode == 0, down.stderr
        assert down.stdout.startswith("done at ") and "s into the run" in down.stdout
        assert (
            served.client(people["ada"]).request(
                "GET", "/v1/projects/net/experiments/line/counters"
            )["links"]["link0"]
            == "down"
        )
        later = served.nestbed("event", "--json", "line", "+30", "link0", "up", **env)
        assert later.returncode == 0 and json.loads(later.stdout)["scheduled_s"] > 29
        wrong = served.nestbed("event", "line", "nosuch", "up", **env)
        assert wrong.returncode == 2 and "nosuch" in wrong.stderr
        assert len(wrong.stderr.strip().splitlines()) == 1
        # bob is not in project net: the experiment is not there for him.
        theirs = served.nestbed("--server", served.url, "--project", "net", "event", "line",
                                "link0", "up", NESTBED_TOKEN=people["bob"])  # fmt: skip
        assert theirs.returncode == 2 and "no project 'net'" in theirs.stderr
    finally:
        assert served.nestbed("swapout", "line", **env).returncode == 0

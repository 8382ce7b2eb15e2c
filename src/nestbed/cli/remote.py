"""The CLI's commands against a nestbed server (``--server URL`` or ``$NESTBED_SERVER``):
list, show, create, swapin, swapout, run, status, event and delete, the batch queue, the project's
settings and idle-swap exemptions, in the project of ``--project`` (or ``$NESTBED_PROJECT``,
or the user's only project).

Each local command hands over to its namesake here when a server is given, so the local
mode stays exactly as it was. Swap-ins and swap-outs run on the server; the command waits
for them (polling the experiment's status) unless told ``--no-wait``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from nestbed.cli.common import err, out, parameters, print_json, state
from nestbed.errors import EnvironmentProblem, UserError
from nestbed.server.client import Client, find_token

POLL_S = 0.2


class Remote:
    """One server, one project, as the command line chose them."""

    def __init__(self) -> None:
        if not state.server:
            raise UserError("no server given; pass --server URL or set NESTBED_SERVER")
        self.client = Client(state.server, find_token())
        self.project = self.client.project(state.project)

    def path(self, name: str | None = None, verb: str = "") -> str:
        return self.client.experiments_path(self.project, name, verb)

    def wait(self, name: str, kind: str) -> dict[str, Any]:
        """The experiment once its ``kind`` operation on the server has ended; one error
        carrying the server's reason if it failed."""
        with err.status(f"{kind} of {name} on {self.client.url}"):
            while True:
                found = self.client.request("GET", self.path(name, "status"))
                op = found.get("operation") or {}
                if op.get("kind") == kind and op.get("status") != "running":
                    break
                time.sleep(POLL_S)
        if op["status"] == "failed":
            raise EnvironmentProblem(f"{kind} of experiment {name} failed: {op['error']}")
        return found  # type: ignore[no-any-return]


def _file_body(file: Path, name: str | None, params: list[str] | None) -> dict[str, Any]:
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{file}: no such experiment file; check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{file}: cannot be read as UTF-8 text ({exc})") from None
    body: dict[str, Any] = {"file_name": file.name, "text": text,
                            "parameters": parameters(params)}  # fmt: skip
    if name is not None:
        body["name"] = name
    return body


def _row(e: dict[str, Any]) -> str:
    warned = f"\n  warning: {e['warning']}" if e.get("warning") else ""
    return f"{e['name']}: {e['state']} (from {e['source_file']}, project {e['project']}){warned}"


def list_(as_json: bool) -> None:
    remote = Remote()
    found = remote.client.request("GET", remote.path())
    if as_json:
        print_json(found)
    elif not found:
        out.print(f"no experiments in project {remote.project}; create one with "
                  "`nestbed create FILE`")  # fmt: skip
    for e in [] if as_json else found:
        out.print(_row(e))


def show(name: str, as_json: bool) -> None:
    remote = Remote()
    found = remote.client.request("GET", remote.path(name))
    if as_json:
        print_json(found)
        return
    from nestbed.cli.render import print_summary

    out.print(_row(found) + f", sha256 {found['source_sha256'][:12]}")
    print_summary(found["ir"], out)


def create(file: Path, name: str | None, params: list[str] | None, as_json: bool) -> None:
    remote = Remote()
    found = remote.client.request("POST", remote.path(), _file_body(file, name, params))
    if as_json:
        print_json(found)
    else:
        out.print(f"created experiment {found['name']} in project {remote.project} on "
                  f"{remote.client.url}")  # fmt: skip


def _defined(remote: Remote, target: str) -> str:
    """An experiment's name, or a file defined (created or replaced) on the server first."""
    path = Path(target)
    if not (path.suffix and path.is_file()):
        return target
    remote.client.request("PUT", remote.path(path.stem), _file_body(path, None, None))
    return path.stem


def swapin(target: str, options: dict[str, Any], wait: bool = True) -> None:
    remote = Remote()
    name = _defined(remote, target)
    remote.client.request("POST", remote.path(name, "swapin"), options)
    if not wait:
        out.print(f"experiment {name} is swapping in on {remote.client.url}")
        return
    found = remote.wait(name, "swapin")
    out.print(f"experiment {name} is {found['state']} on {remote.client.url}")


def run(target: str, options: dict[str, Any], as_json: bool) -> None:
    """A whole run on the server; waits for its end and prints how its run ended."""
    remote = Remote()
    name = _defined(remote, target)
    remote.client.request("POST", remote.path(name, "run"), options)
    remote.wait(name, "run")
    found = remote.client.request("GET", remote.path(name))
    last = found["runs"][-1] if found["runs"] else {}
    if as_json:
        print_json(last)
        return
    out.print(f"run {last.get('id')} of experiment {name}: {last.get('outcome')}; results on "
              f"the server in {last.get('results_dir')}")  # fmt: skip


def swapout(name: str, wait: bool = True) -> None:
    remote = Remote()
    remote.client.request("POST", remote.path(name, "swapout"))
    if not wait:
        out.print(f"experiment {name} is swapping out on {remote.client.url}")
        return
    found = remote.wait(name, "swapout")
    out.print(f"experiment {name} is {found['state']} on {remote.client.url}")


def status(name: str, as_json: bool) -> None:
    remote = Remote()
    found = remote.client.request("GET", remote.path(name, "status"))
    if as_json:
        print_json(found)
        return
    out.print(_row(found))
    op = found.get("operation")
    if op:
        ended = f", {op['error']}" if op.get("error") else ""
        out.print(f"last operation: {op['kind']} by {op['actor']}: {op['status']}{ended}")
    for notice in found.get("notices") or []:
        out.print(f"{notice['at'][:19]} {notice['action']}: {notice['outcome']}")
    live = found.get("live")
    if live and "error" not in live:
        from nestbed.cli.render import status_tables

        out.print(status_tables(live))


def event(name: str, obj: str, verb: str, args: list[str], after_s: float) -> dict[str, Any]:
    """Sends an event to the experiment on the server; the controller's reply, as the local
    command gets it (an event the server refuses or that fails is its one-line error)."""
    remote = Remote()
    body = {"object": obj, "verb": verb, "args": args, "after_s": after_s}
    reply: dict[str, Any] = remote.client.request("POST", remote.path(name, "events"), body)
    return reply


def delete(name: str) -> None:
    remote = Remote()
    remote.client.request("DELETE", remote.path(name))
    out.print(f"deleted experiment {name} of project {remote.project}")


# -- the batch queue ----------------------------------------------------------------------------


def _entry_row(e: dict[str, Any]) -> str:
    failed = f", last failure: {e['last_failure']}" if e["last_failure"] else ""
    return (f"{e['id']}: {e['experiment']} {e['state']} (priority {e['priority']}, "
            f"{e['attempts']} attempts{failed})")  # fmt: skip


def batch_submit(target: str, priority: int, as_json: bool) -> None:
    remote = Remote()
    name = _defined(remote, target)
    found = remote.client.request("POST", remote.path(name, "batch"), {"priority": priority})
    if as_json:
        print_json(found)
    else:
        out.print(f"queued experiment {name} as batch entry {found['id']} on "
                  f"{remote.client.url}")  # fmt: skip


def _listing(what: str, rows: str, row: Any, as_json: bool) -> None:
    """Prints the project's ``rows`` (``/v1/projects/P/ROWS``), one line each by ``row``."""
    remote = Remote()
    found = remote.client.request("GET", f"/v1/projects/{remote.project}/{rows}")
    if as_json:
        print_json(found)
        return
    if not found:
        out.print(f"no {what} in project {remote.project}")
    for e in found:
        out.print(row(e))


def batch_list(as_json: bool) -> None:
    _listing("batch entries", "batch", _entry_row, as_json)


def batch_cancel(entry_id: int) -> None:
    remote = Remote()
    found = remote.client.request("DELETE", f"/v1/projects/{remote.project}/batch/{entry_id}")
    out.print(_entry_row(found))


# -- the project's settings and exemptions --------------------------------------------------


def project_settings(changes: dict[str, Any], as_json: bool) -> None:
    remote = Remote()
    path = f"/v1/projects/{remote.project}/settings"
    found = remote.client.request("PATCH", path, changes) if changes else (
        remote.client.request("GET", path))  # fmt: skip
    if as_json:
        print_json(found)
        return
    own = found["own"]

    def shown(key: str, value: Any, unit: str = " s") -> str:
        said = "none" if value is None else f"{value:g}{unit}"
        return f"{said}{'' if own.get(key) is not None else ' (server default)'}"

    out.print(f"project {found['project']} on {remote.client.url}:")
    out.print(f"  idle swap-out after {shown('idle_s', found['idle_s'])}, warned "
              f"{shown('warn_before_s', found['warn_before_s'])} before")  # fmt: skip
    out.print(f"  maximum duration {shown('max_duration_s', found['max_duration_s'])}")
    low, high = found["priority_min"], found["priority_max"]
    limits = "any" if low is None and high is None else (
        f"{'' if low is None else low} to {'' if high is None else high}".strip())  # fmt: skip
    out.print(f"  batch priorities: {limits}")


def _exemption_row(e: dict[str, Any]) -> str:
    until = f" until {e['until'][:19]}" if e.get("until") else ""
    decided = f" by {e['decided_by']}" if e.get("decided_by") else ""
    note = f" ({e['note']})" if e.get("note") else ""
    force = ", in force" if e.get("in_force") else ""
    return (f"{e['id']}: {e['experiment']}{until}: {e['state']}{decided}{note}{force}; asked by "
            f"{e['asked_by']}: {e['reason']}")  # fmt: skip


def exemption_ask(name: str, reason: str, until: str | None, as_json: bool) -> None:
    remote = Remote()
    body: dict[str, Any] = {"reason": reason, "until": until}
    found = remote.client.request("POST", remote.path(name, "exemption"), body)
    if as_json:
        print_json(found)
    else:
        out.print(f"asked for exemption {found['id']} of experiment {name}; a leader of "
                  f"project {remote.project} grants or refuses it")  # fmt: skip


def exemption_list(as_json: bool) -> None:
    _listing("exemptions", "exemptions", _exemption_row, as_json)


def exemption_decide(exemption_id: int, verb: str, note: str) -> None:
    remote = Remote()
    path = f"/v1/projects/{remote.project}/exemptions/{exemption_id}/{verb}"
    out.print(_exemption_row(remote.client.request("POST", path, {"note": note})))

"""The portal's pages and the API's results and live routes against a real server process
on the fake back end, read as a browser without JavaScript reads them: create with problems
marked, the experiment pages, projects' isolation (404 exactly as in the API), CSRF, the
login cookie, saved positions, downloads kept inside the run's folder."""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import time
import urllib.error
import urllib.request
from unittest.mock import ANY

from portal_helpers import EXP, PAGE, Session, long_report, ran
from server_helpers import LINE, People, Served, wait_for

BAD = """\
nodes: [{name: a}, {name: b}]
links:
  - {name: link0, members: [a, zz], delay: 10ms}
"""


def members(tar: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(tar)) as opened:
        return opened.getmembers()


def test_a_bad_file_is_marked_at_its_line_and_nothing_is_stored(
    served: Served, people: People, ada: Session
) -> None:
    reply = ada.post("/portal/new", {"project": "net", "file_name": "line.yaml", "text": BAD})
    assert reply.status == 200 and reply.url.endswith("/portal/new")
    marked = re.findall(r'<li id="line-(\d+)" class="marked">', reply.text)
    assert marked == ["3"]
    assert "line.yaml:3</a>: link link0: member &#39;zz&#39; does not exist" in reply.text
    assert "a, zz" in reply.text  # the text comes back to be fixed
    assert served.client(people["ada"]).request("GET", "/v1/projects/net/experiments") == []
    fixed = ada.post("/portal/new", {"project": "net", "file_name": "line.yaml", "text": LINE})
    assert fixed.status == 200 and fixed.url.endswith(PAGE)
    assert '<span class="state state-defined" id="state">defined</span>' in fixed.text
    listed = ada.get("/portal/")
    assert f'<a href="{PAGE}">line</a>' in listed.text and "ada" in listed.text


def test_an_uploaded_file_is_read_as_a_form_upload(served: Served, ada: Session) -> None:
    boundary = "i23boundary"
    parts = [("csrf", None, ada.csrf()), ("project", None, "net"), ("text", None, ""),
             ("file_name", None, "x.ns"), ("file", "line.yaml", LINE)]  # fmt: skip
    body = b""
    for name, filename, value in parts:
        extra = f'; filename="{filename}"' if filename else ""
        body += (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"{extra}\r\n\r\n'
                 f"{value}\r\n").encode()  # fmt: skip
    body += f"--{boundary}--\r\n".encode()
    request = urllib.request.Request(served.url + "/portal/new", data=body, method="POST",
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})  # fmt: skip
    reply = ada.open(request)
    assert reply.status == 200 and reply.url.endswith(PAGE), reply.text[:400]


def test_the_pages_of_a_run(served: Served, people: People, ada: Session) -> None:
    folder = ran(served, people)
    page = ada.get(PAGE)
    assert '<a href="/portal/p/net/e/line/runs/1">run 1</a>' in page.text
    for path in (
        "",
        "/topology",
        "/live",
        "/runs/1",
        "/runs/1?table=links/counters.csv&sort=t_s&desc=1",
    ):
        reply = ada.get(PAGE + path)
        assert reply.status == 200, (path, reply.text[:300])
    run = ada.get(PAGE + "/runs/1").text
    assert "manifest.json" in run and 'href="/portal/p/net/e/line/runs/1/download"' in run
    topology = ada.get(PAGE + "/topology").text
    assert "a→b" in topology and '"id": "e:link0"' in topology
    names = [m.name for m in members(ada.get(PAGE + "/runs/1/download").body)]
    assert "line-run1/manifest.json" in names
    assert len([n for n in names if not n.endswith("/")]) == len(
        [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    )


def test_downloads_stay_inside_the_run_folder(served: Served, people: People, ada: Session) -> None:
    folder = ran(served, people)
    secret = served.root / "secret.txt"
    secret.write_text("not for the web")
    (folder / "escape.txt").symlink_to(secret)
    (folder / "escape-dir").symlink_to(served.root)
    api = served.client(people["ada"])
    for path in ("../secret.txt", "..%2Fsecret.txt", "escape.txt", "escape-dir/secret.txt",
                 "plots/../../secret.txt", "%2Fetc%2Fpasswd"):  # fmt: skip
        assert ada.get(f"{PAGE}/runs/1/files/{path}").status == 404, path
        status, _ = _api_get(served, people["ada"], f"{EXP}/runs/1/files/{path}")
        assert status == 404, path
    assert api.request("GET", EXP + "/runs/1/files/manifest.json")["experiment"]
    sent = members(ada.get(PAGE + "/runs/1/download").body)
    assert not [m for m in sent if "escape" in m.name]
    assert all(m.isfile() for m in sent)


def test_a_page_a_program_wrote_into_its_run_is_served_without_its_scripts(
    served: Served, people: People
) -> None:
    folder = ran(served, people)
    (folder / "page.html").write_text("<script>fetch('/portal/')</script>")
    request = urllib.request.Request(served.url + f"{EXP}/runs/1/files/page.html",
                                     headers={"Authorization": f"Bearer {people['ada']}"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=60) as r:
        assert r.headers["Content-Security-Policy"] == "sandbox"
        assert r.headers["X-Content-Type-Options"] == "nosniff"


def _api_get(served: Served, token: str, path: str) -> tuple[int, bytes]:
    request = urllib.request.Request(served.url + path,
                                     headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_another_projects_pages_and_files_are_404_as_in_the_api(
    served: Served, people: People, bob: Session
) -> None:
    ran(served, people)
    for path in ("", "/topology", "/live", "/live/stream", "/runs/1", "/runs/1/download",
                 "/runs/1/pcaps", "/runs/1/files/manifest.json"):  # fmt: skip
        assert bob.get(PAGE + path).status == 404, path
    for path in ("", "/runs", "/runs/1", "/runs/1/download", "/runs/1/files/manifest.json",
                 "/counters", "/counters/stream"):  # fmt: skip
        assert _api_get(served, people["bob"], EXP + path)[0] == 404, path
    assert bob.post(PAGE + "/swapin", {}).status == 404
    assert bob.post(PAGE + "/delete", {}).status == 404
    assert "/portal/p/net/" not in bob.get("/portal/").text
    assert served.client(people["ada"]).request("GET", EXP)["state"] == "swapped"


def test_forms_without_the_csrf_token_change_nothing(
    served: Served, people: People, ada: Session
) -> None:
    served.client(people["ada"]).request("PUT", EXP, {"file_name": "line.yaml", "text": LINE})
    for token in ("", "0" * 64):
        reply = ada.post(PAGE + "/delete", {"csrf": token}, csrf=False)
        assert reply.status == 403 and "CSRF" in reply.text
    assert served.client(people["ada"]).request("GET", EXP)["state"] == "defined"


def test_the_login_cookie_is_httponly_and_samesite_strict(served: Served, people: People) -> None:
    session = Session(served.url)
    token = session.csrf("/login")
    login = urllib.request.Request(served.url + "/portal/login", method="POST",
                                   data=f"token={people['cy']}&csrf={token}".encode())  # fmt: skip
    seed = next(c.value for c in session.jar if c.name == "nestbed_csrf")
    login.add_header("Cookie", f"nestbed_csrf={seed}")

    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return None

    try:
        urllib.request.build_opener(Keep).open(login, timeout=60)
        raise AssertionError("the login did not redirect")
    except urllib.error.HTTPError as e:
        cookies = e.headers.get_all("set-cookie")
        assert e.code == 303
    for name in ("nestbed_session", "nestbed_csrf"):
        cookie = next(c for c in cookies if c.startswith(name + "="))
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/portal" in cookie
    assert f"nestbed_csrf={seed}" not in " ".join(cookies)  # a new session, a new seed
    assert session.get("/portal/").url.endswith("/portal/login")
    wrong = session.post("/portal/login", {"token": "wrong", "csrf": token}, csrf=False)
    assert wrong.status == 401


def test_the_login_form_needs_its_csrf_token(served: Served, people: People) -> None:
    session = Session(served.url)
    good = session.csrf("/login")
    for sent in ({}, {"csrf": ""}, {"csrf": "0" * 64}, {"csrf": good[:-1] + "x"}):
        reply = session.post("/portal/login", {"token": people["cy"], **sent}, csrf=False)
        assert reply.status == 403 and "CSRF" in reply.text, sent
        assert "nestbed_session" not in {c.name for c in session.jar}
    # Another browser's token is no good with this one's seed cookie.
    other = Session(served.url).csrf("/login")
    reply = session.post("/portal/login", {"token": people["cy"], "csrf": other}, csrf=False)
    assert reply.status == 403
    session.post("/portal/login", {"token": people["cy"], "csrf": good}, csrf=False)
    assert session.get("/portal/").url.endswith("/portal/")
    # The session has its own token: the login page's is refused once logged in.
    assert session.csrf() != good
    assert session.post("/portal/logout", {"csrf": good}, csrf=False).status == 403
    assert session.get("/portal/").url.endswith("/portal/")
    assert session.post("/portal/logout", {}).url.endswith("/portal/login")
    assert session.get("/portal/").url.endswith("/portal/login")


def test_dragged_positions_are_kept_for_the_experiments_own_nodes(
    served: Served, people: People, ada: Session
) -> None:
    served.client(people["ada"]).request("PUT", EXP, {"file_name": "line.yaml", "text": LINE})
    sent = {"a": {"x": 10, "y": 20}, "zz": {"x": 1, "y": 1}, "../../x": {"x": 1, "y": 1},
            "b": {"x": "nan", "y": 0}}  # fmt: skip
    assert ada.post(PAGE + "/positions", {"positions": json.dumps(sent)}).status == 204
    kept = served.root / "results" / ".portal" / "positions" / "net--line.json"
    assert json.loads(kept.read_text()) == {"a": {"x": 10.0, "y": 20.0}}
    assert placed(ada) == {"n:a": {"x": 10.0, "y": 20.0}}
    assert sorted(os.listdir(kept.parent)) == ["net--line.json"]
    # The page's topology is kept between requests: a new drag and a new definition show.
    ada.post(PAGE + "/positions", {"positions": json.dumps({"b": {"x": 5, "y": 6}})})
    assert placed(ada) == {"n:a": {"x": 10.0, "y": 20.0}, "n:b": {"x": 5.0, "y": 6.0}}
    wider = LINE.replace("[{name: a}, {name: b}]", "[{name: a}, {name: b}, {name: c}]")
    served.client(people["ada"]).request("PUT", EXP, {"file_name": "line.yaml", "text": wider})
    assert set(placed(ada, every=True)) == {"n:a", "n:b", "n:c", "e:link0"}
    assert "3 nodes, 1 links" in ada.get(PAGE).text


def placed(session: Session, every: bool = False) -> dict[str, object]:
    """The topology page's elements (as its script reads them): their positions by id,
    or (``every``) each element by id."""
    text = session.get(PAGE + "/topology").text
    found = re.search(r'<script type="application/json" id="elements">(.*?)</script>', text, re.S)
    assert found, text[:300]
    elements = json.loads(found.group(1))
    if every:
        return {e["data"]["id"]: e for e in elements}
    return {e["data"]["id"]: e["position"] for e in elements if "position" in e}


def test_events_and_counters_through_the_api(served: Served, people: People) -> None:
    ada = served.client(people["ada"])
    ada.request("PUT", EXP, {"file_name": "line.yaml", "text": LINE})
    status, body = _api_post(served, people["ada"], EXP + "/events", {"text": "link0 down"})
    assert status == 409 and b"not swapped in" in body
    ada.request("POST", EXP + "/swapin")
    wait_for(ada, EXP, "swapin")
    try:
        reply = ada.request("POST", EXP + "/events", {"text": "link0 down"})
        assert reply["event"]["outcome"] == "ok" and reply["event"]["verb"] == "down"
        now = ada.request("GET", EXP + "/counters")
        assert now["state"] == "active" and now["links"]["link0"] == "down"
        assert now["events"][0]["verb"] == "down"
        status, body = _api_post(served, people["ada"], EXP + "/events", {"text": "nosuch up"})
        assert status == 409 and b"nosuch" in body
        later = ada.request("POST", EXP + "/events", {"text": "+30 link0 up"})
        assert later["scheduled_s"] > 0
    finally:
        ada.request("POST", EXP + "/swapout")
        wait_for(ada, EXP, "swapout")


def _api_post(served: Served, token: str, path: str, body: dict) -> tuple[int, bytes]:
    request = urllib.request.Request(served.url + path, data=json.dumps(body).encode(),
                                     method="POST", headers={"Authorization": f"Bearer {token}",
                                                             "Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


CHAIN = """\
nodes: [{name: a}, {name: b}, {name: c}, {name: d}]
links:
  - {name: left, members: [a, b], delay: 1ms}
  - {name: mid, members: [b, c], delay: 1ms}
  - {name: right, members: [c, d], delay: 1ms}
"""


def test_counters_of_chosen_links_or_the_top_pipes_and_again_after_a_new_swap_in(
    served: Served, people: People, ada: Session
) -> None:
    api = served.client(people["ada"])
    api.request("PUT", EXP, {"file_name": "chain.yaml", "text": CHAIN})
    for _ in range(2):  # the second swap-in's controller and plan are new: the server opens them
        api.request("POST", EXP + "/swapin")
        wait_for(api, EXP, "swapin")
        try:
            every = api.request("GET", EXP + "/counters")
            assert len(every["counters"]) == every["pipes_total"] == 12
            api.request("POST", EXP + "/events", {"text": "mid down"})
            top = api.request("GET", EXP + "/counters?top=4")
            assert top["pipes_total"] == 12
            assert [(r["link"], r["state"]) for r in top["counters"]] == [("mid", "down")] * 4
            chosen = api.request("GET", EXP + "/counters?link=right&link=left&top=6")
            assert sorted({r["link"] for r in chosen["counters"]}) == ["left", "right"]
            assert len(chosen["counters"]) == 6
            page = ada.get(PAGE + "/live")
            assert page.status == 200 and page.text.count('data-key="mid|') == 4
        finally:
            api.request("POST", EXP + "/swapout")
            wait_for(api, EXP, "swapout")
    assert api.request("GET", EXP + "/counters") == {"state": "swapped", "at": ANY}
    status, _ = _api_get(served, people["ada"], EXP + "/counters?top=0")
    assert status == 422


def test_a_long_report_shows_its_first_part_and_the_whole_on_demand(
    served: Served, people: People, ada: Session
) -> None:
    long_report(ran(served, people), served.client(people["ada"]))
    run = ada.get(PAGE + "/runs/1").text
    assert "<td>l0</td>" in run and "<td>l4999</td>" not in run and "THE END" not in run
    kept = served.root / "results" / ".portal" / "reports"
    for _ in range(600):  # the run's page started the whole one rendering, to be kept
        if list(kept.glob("*.html")):
            break
        time.sleep(0.1)
    assert "<td>l4999</td>" in next(kept.glob("*.html")).read_text()
    assert "<th>link</th>" in run  # the cut table keeps its head
    more = re.search(r'<a href="([^"]+)" hx-get="([^"]+)"[^>]*>Show the whole report', run)
    assert more and more.group(1) == more.group(2) == PAGE + "/runs/1/report"
    whole = ada.get(more.group(1)).text  # without JavaScript: a page of its own
    assert "<td>l4999</td>" in whole and "THE END" in whole and "<h1>line: run 1: report" in whole
    swapped = ada.open(urllib.request.Request(served.url + more.group(1),
                                              headers={"HX-Request": "true"}))  # fmt: skip
    assert swapped.text.startswith('<div class="report">') and "THE END" in swapped.text
    assert "<html" not in swapped.text
    assert ada.get(PAGE + "/runs/2/report").status == 404


def test_a_reports_first_part_is_cut_where_its_markdown_stays_whole() -> None:
    from nestbed.portal.results import report_head

    assert report_head("# short\n", budget=100) == ("# short\n", False)
    table = "| a |\n|---|\n" + "| 1 |\n" * 50
    head, cut = report_head("# t\n\n" + table + "\n## next\n", budget=40)
    assert cut and head.endswith("| 1 |\n") and head.startswith("# t\n\n| a |\n|---|\n")
    fenced = "# f\n\n```\n" + "x\n\ny\n" * 40 + "```\n\nafter\n"
    head, cut = report_head(fenced, budget=20)
    assert cut and head.count("```") == 2 and head.endswith("```\n")
    words = "word " * 100
    assert report_head(words, budget=10) == (words, False)  # no place to cut: all of it

"""The web UI over HTTP against real nodes: sign-in, sessions, CSRF, levels, Host, SSE, uploads,
files, and the headers every answer carries.

A: founder (anchor), embedding and RAG.   B: trusted, neither; its UI accepts uploads of at
most 4 KiB.  C: member, neither, revoked by the test of a revoked node's UI.  The UIs listen on
any free port of 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from hearthnet.config import UiConfig
from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.shared_data import PDF_DIR
from tests.ui.harness import (
    Ui,
    browser_missing,
    chromium,
    owner_link,
    person_link,
    screenshot,
    token_of,
    ui_url,
)

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "hearthnet" / "demo"
CID = "blake3:" + "ab" * 32
UI_ENV = {"HEARTHNET_UI_LISTEN": "127.0.0.1:0"}


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("ui-http"))
    m.env["HEARTHNET_OCR"] = "0"  # no OCR provider in the mesh: a scan is refused ("run OCR first")
    try:
        a = m.add("a", env=UI_ENV)
        b = m.add("b", env={**UI_ENV, "HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        config = b.home / "config.toml"
        config.write_text(config.read_text().replace("[ui]\n", "[ui]\nmax_upload_bytes = 4096\n"))
        c = m.add("c", env={**UI_ENV, "HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        m.found(a)
        m.invite(a, b, "trusted")
        m.invite(a, c, "member")
        m.wait_full_mesh(timeout=90)
        yield m
    finally:
        m.close()


@pytest.fixture(scope="module")
def owner(mesh: LocalMesh) -> Iterator[Ui]:
    ui = Ui(owner_link(mesh.nodes["a"]))
    yield ui
    ui.close()


def nodes(mesh: LocalMesh) -> tuple[MeshNode, MeshNode]:
    return mesh.nodes["a"], mesh.nodes["b"]


def all_routes() -> list[tuple[str, str]]:
    """Every (method, path) the UI serves, read from the application itself."""
    from starlette.routing import Mount, Route

    from hearthnet.frontends.http import app as app_module
    from hearthnet.frontends.http import ask, files, library, mesh

    state: Any = SimpleNamespace(config=UiConfig(), sessions=None, port=lambda: 0)
    guard = app_module.build_app(
        state, [*library.routes(state), *mesh.routes(state), *ask.routes(state), *files.routes(state)]
    )
    out = []
    for route in guard.app.routes:  # type: ignore[attr-defined]
        if isinstance(route, Route):
            for method in sorted(route.methods or {"GET"}):
                if method != "HEAD":
                    out.append((method, route.path.replace("{cid}", CID)))
        elif isinstance(route, Mount):
            out.append(("GET", route.path + "/app.css"))
    return out


def upload(ui: Ui, path: Path, corpus: str = "household", name: str | None = None) -> httpx.Response:
    return ui.post(
        "/api/upload",
        params={"corpus": corpus, "name": name or path.name},
        content=path.read_bytes(),
    )


def finished(ui: Ui, job_id: str, timeout: float = 240) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        jobs = {j["id"]: j for j in ui.get("/api/jobs").json()["jobs"]}
        job = jobs[job_id]
        return job if job["state"] in ("done", "error") else None

    return wait_for(done, timeout=timeout, what=f"upload {job_id} to finish")


# -- who may come in -----------------------------------------------------------------------
def test_every_route_refuses_a_request_without_a_session(mesh: LocalMesh) -> None:
    a, _ = nodes(mesh)
    routes = all_routes()
    assert ("GET", "/api/live") in routes and ("POST", "/api/upload") in routes
    public = {"/login", "/api/login", "/api/login/preview", "/static/app.css"}
    with httpx.Client(base_url=ui_url(a), timeout=30) as http:
        for method, path in routes:
            response = http.request(method, path, content=b"{}")
            if path in public:
                continue
            assert response.status_code == 401, (method, path, response.status_code)
            if path.startswith(("/api/", "/files/")):
                assert response.json()["error"] == "unauthorized"
            else:  # a page: the sign-in page, which names no data
                assert "hearthnet ui" in response.text
        # a cookie that names no session is no session
        http.cookies.set("hn_session", "made-up")
        assert http.get("/api/live").status_code == 401
        assert http.get("/api/session").status_code == 401


def test_owner_link_signs_in_once_as_anchor(mesh: LocalMesh) -> None:
    a, _ = nodes(mesh)
    link = owner_link(a)
    assert link.startswith(ui_url(a) + "/login#hn_")
    with httpx.Client(base_url=ui_url(a)) as http:
        first = http.post("/api/login", json={"token": token_of(link)})
        assert first.status_code == 200 and first.json()["level"] == "anchor"
        cookie = first.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert http.get("/api/session").json()["owner"] is True
    with httpx.Client(base_url=ui_url(a)) as http:
        again = http.post("/api/login", json={"token": token_of(link)})
        assert again.status_code == 401 and "already used" in again.json()["message"]


def test_person_link_is_reusable_until_revoked_and_revoking_signs_out(mesh: LocalMesh) -> None:
    a, _ = nodes(mesh)
    link = person_link(a, "Grandma", "member")
    first, second = Ui(link), Ui(link)
    try:
        me = first.get("/api/session").json()
        assert (me["name"], me["level"], me["owner"]) == ("Grandma", "member", False)
        listed = a.cli_json("ui", "token", "list")["tokens"]
        token = next(t for t in listed if t["name"] == "Grandma")
        assert token["last_used"] is not None
        a.cli("ui", "token", "revoke", "Grandma")  # another process writes the store
        assert first.get("/api/session").status_code == 401
        assert second.get("/api/live").status_code == 401
        with httpx.Client(base_url=ui_url(a)) as http:
            assert http.post("/api/login", json={"token": token_of(link)}).status_code == 401
    finally:
        first.close()
        second.close()


def test_person_tokens_are_member_or_trusted_never_anchor(mesh: LocalMesh) -> None:
    a, _ = nodes(mesh)
    proc = a.cli("ui", "token", "create", "--name", "x", "--level", "anchor", check=False)
    assert proc.returncode != 0 and "invalid choice" in proc.stderr


def test_tokens_are_stored_hashed_in_a_private_file(mesh: LocalMesh) -> None:
    a, _ = nodes(mesh)
    link = person_link(a, "Hashed", "trusted")
    db = a.home / "ui.sqlite3"
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
    assert token_of(link).encode() not in db.read_bytes()
    assert stat.S_IMODE(os.stat(a.home / "ui.json").st_mode) == 0o600


def test_host_must_name_this_ui(mesh: LocalMesh, owner: Ui) -> None:
    a, _ = nodes(mesh)
    port = ui_url(a).rsplit(":", 1)[1]
    assert owner.get("/api/session", headers={"Host": f"evil.example:{port}"}).status_code == 421
    assert owner.get("/api/session", headers={"Host": "127.0.0.1:1"}).status_code == 421
    assert owner.get("/api/session", headers={"Host": f"localhost:{port}"}).status_code == 200


# -- state-changing requests ----------------------------------------------------------------
def test_post_without_the_csrf_token_or_from_another_origin_is_refused(mesh: LocalMesh, owner: Ui) -> None:
    body = {"node_id": mesh.nodes["b"].node_id, "level": "member"}
    bare = owner.http.post("/api/mesh/invite", json=body)
    assert bare.status_code == 403 and "CSRF" in bare.json()["message"]
    wrong = owner.http.post("/api/mesh/invite", json=body, headers={"X-CSRF-Token": "x" * 32})
    assert wrong.status_code == 403
    foreign = owner.post("/api/mesh/invite", json=body, headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403 and "cross-origin" in foreign.json()["message"]
    cross_site = owner.post("/api/mesh/invite", json=body, headers={"Sec-Fetch-Site": "cross-site"})
    assert cross_site.status_code == 403
    events = [e["type"] for e in owner.get("/api/events").json()["events"]]
    assert events.count("member.invited") == 2  # b's and c's own: nothing above went through


def test_a_member_login_cannot_change_anything(mesh: LocalMesh) -> None:
    a, b = nodes(mesh)
    member = Ui(person_link(a, "Kid", "member"))
    try:
        page = member.get("/library").text
        assert 'id="dropzone"' not in page and "Add documents" not in page
        assert 'id="invite-form"' not in member.get("/mesh").text
        pdf = DEMO / "heating_handbook.pdf"
        refused = [
            upload(member, pdf),
            member.post("/api/documents/delete", json={"corpus": "household", "doc_cid": CID}),
            member.post("/api/mesh/invite", json={"node_id": b.node_id}),
            member.post("/api/mesh/promote", json={"node_id": b.node_id, "level": "trusted"}),
            member.post("/api/mesh/revoke", json={"node_id": b.node_id}),
        ]
        assert [r.status_code for r in refused] == [403] * 5, [r.text for r in refused]
        assert "needs a trusted login" in refused[0].json()["message"]
        assert member.get("/api/mesh").status_code == 200  # reading is allowed
        assert not list((a.home / "ui-uploads").iterdir())  # the upload was refused before its body
    finally:
        member.close()


def test_a_trusted_login_cannot_act_as_anchor(mesh: LocalMesh) -> None:
    a, b = nodes(mesh)
    trusted = Ui(person_link(a, "Partner", "trusted"))
    try:
        assert 'id="dropzone"' in trusted.get("/library").text
        assert 'id="invite-form"' not in trusted.get("/mesh").text
        for path, body in (
            ("/api/mesh/invite", {"node_id": b.node_id}),
            ("/api/mesh/promote", {"node_id": b.node_id, "level": "anchor"}),
            ("/api/mesh/revoke", {"node_id": b.node_id}),
        ):
            response = trusted.post(path, json=body)
            assert response.status_code == 403, response.text
            assert "needs an anchor login" in response.json()["message"]
    finally:
        trusted.close()


# -- the live stream --------------------------------------------------------------------------
def test_live_stream_says_hello_and_carries_upload_progress(mesh: LocalMesh, owner: Ui) -> None:
    with owner.http.stream("GET", "/api/live", timeout=300) as live:
        assert live.headers["content-type"].startswith("text/event-stream")
        lines = live.iter_lines()
        hello = _next_event(lines)
        assert hello[0] == "hello" and hello[1]["node_id"] == mesh.nodes["a"].node_id
        job = upload(owner, DEMO / "heating_handbook.pdf").json()["job"]
        stages = []
        while True:
            kind, data = _next_event(lines)
            if kind == "job" and data["id"] == job["id"]:
                stages.append((data["state"], data["stage"], data["current"], data["total"]))
                if data["state"] in ("done", "error"):
                    break
    assert stages[-1][0] == "done", stages
    assert ("importing", "import", 0, 1) in stages
    assert any(s[1] == "write" and s[3] > 0 for s in stages), stages  # rag.ingest's own frames


def _next_event(lines: Iterator[str]) -> tuple[str, Any]:
    kind = None
    for line in lines:
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: ") and kind is not None:
            return kind, json.loads(line[6:])
    raise AssertionError("the live stream ended")


# -- uploads and files ----------------------------------------------------------------------
def test_upload_then_the_file_is_served_as_a_pdf_inline(mesh: LocalMesh, owner: Ui) -> None:
    job = finished(owner, upload(owner, DEMO / "solar_and_battery.pdf").json()["job"]["id"])
    assert job["state"] == "done" and job["result"]["chunks"] > 0
    corpora = owner.get("/api/corpora").json()["corpora"]
    household = next(c for c in corpora if c["name"] == "household")
    assert household["online"] and household["docs"] >= 1 and household["node"] == mesh.nodes["a"].node_id
    served = owner.get(f"/files/{job['result']['doc_cid']}")
    assert served.status_code == 200
    assert served.headers["content-type"] == "application/pdf"
    assert served.headers["content-disposition"].startswith("inline")
    assert served.content == (DEMO / "solar_and_battery.pdf").read_bytes()
    assert "script-src 'self'" in served.headers["content-security-policy"]


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        ("scanned_image_only_no_text.pdf", "bad_request", "run OCR first"),
        ("encrypted_password_openpassword.pdf", "bad_request", "password"),
        ("corrupt_header_only.pdf", "bad_request", "not a readable PDF"),
    ],
)
def test_upload_errors_say_what_is_wrong(owner: Ui, name: str, code: str, words: str) -> None:
    job = finished(owner, upload(owner, PDF_DIR / name).json()["job"]["id"])
    assert (job["state"], job["error"]) == ("error", code), job
    assert words in job["message"]


def test_empty_and_oversized_uploads_are_refused_and_leave_nothing(mesh: LocalMesh) -> None:
    _, b = nodes(mesh)
    ui = Ui(owner_link(b))
    try:
        empty = upload(ui, PDF_DIR / "empty_zero_bytes.pdf")
        assert empty.status_code == 400 and "empty" in empty.json()["message"]
        big = upload(ui, PDF_DIR / "multicolumn_2col_latex.pdf")  # over b's 4 KiB cap
        assert big.status_code == 413 and "larger" in big.json()["message"]
        chunked = ui.post(  # no Content-Length: the cap holds while the body streams in
            "/api/upload",
            params={"corpus": "household", "name": "x.pdf"},
            content=iter([b"%PDF-" + b"x" * 1000] * 8),
        )
        assert chunked.status_code == 413
        assert not list((b.home / "ui-uploads").iterdir())

        def cut() -> Iterator[bytes]:
            yield b"%PDF-" + b"x" * 1000
            raise ConnectionAbortedError("the browser went away")

        with pytest.raises(ConnectionAbortedError):
            ui.post("/api/upload", params={"corpus": "household", "name": "x.pdf"}, content=cut())
        wait_for(lambda: not list((b.home / "ui-uploads").iterdir()), timeout=10, what="the cut upload to go")
        assert ui.get("/api/session").status_code == 200
        assert "Exception in ASGI application" not in b.log_tail(200)  # an expected end, not a failure
        bad = ui.post("/api/upload", params={"corpus": "Bad Name", "name": "x.pdf"}, content=b"x")
        assert bad.status_code == 400
        system = ui.post("/api/upload", params={"corpus": "system", "name": "x.pdf"}, content=b"x")
        assert system.status_code == 400 and "read-only" in system.json()["message"]
    finally:
        ui.close()


def test_personal_documents_stay_with_the_owner_of_their_node(mesh: LocalMesh, owner: Ui) -> None:
    a, b = nodes(mesh)
    job = finished(owner, upload(owner, DEMO / "garden_and_seeds.pdf", corpus="personal").json()["job"]["id"])
    assert job["state"] == "done", job
    cid = job["result"]["doc_cid"]
    assert owner.get(f"/files/{cid}").status_code == 200
    member = Ui(person_link(a, "Guest", "trusted"))
    other = Ui(owner_link(b))
    try:
        assert member.get(f"/files/{cid}").status_code == 404
        assert all(c["name"] != "personal" for c in member.get("/api/corpora").json()["corpora"])
        personal = member.post("/api/upload", params={"corpus": "personal", "name": "x.pdf"}, content=b"x")
        assert personal.status_code == 403
        # another node's owner: file.read on A refuses a private blob to a peer
        assert other.get(f"/files/{cid}", params={"node": a.node_id}).status_code == 404
    finally:
        member.close()
        other.close()


def test_files_from_another_node_are_fetched_and_served(mesh: LocalMesh, owner: Ui) -> None:
    a, b = nodes(mesh)
    job = finished(owner, upload(owner, DEMO / "heating_handbook.pdf").json()["job"]["id"])
    other = Ui(owner_link(b))
    try:
        served = other.get(f"/files/{job['result']['doc_cid']}", params={"node": a.node_id})
        assert served.status_code == 200 and served.headers["content-type"] == "application/pdf"
        assert served.content == (DEMO / "heating_handbook.pdf").read_bytes()
        assert other.get("/files/not-a-cid").status_code == 400
        assert other.get(f"/files/{CID}").status_code == 404
    finally:
        other.close()


# -- asking ------------------------------------------------------------------------------------
def ask(ui: Ui, question: str, **extra: Any) -> list[tuple[str, Any]]:
    events = []
    with ui.http.stream(
        "POST",
        "/api/ask",
        json={"question": question, **extra},
        headers={"X-CSRF-Token": ui.csrf},
        timeout=120,
    ) as response:
        assert response.status_code == 200, response.read()
        lines = response.iter_lines()
        while True:
            try:
                kind, data = _next_event(lines)
            except AssertionError:
                break
            events.append((kind, data))
            if kind in ("done", "error"):
                break
    return events


def test_chats_belong_to_the_login_that_made_them(mesh: LocalMesh, owner: Ui) -> None:
    a, _ = nodes(mesh)
    finished(owner, upload(owner, DEMO / "heating_handbook.pdf").json()["job"]["id"])
    events = ask(owner, "When is the boiler serviced?")
    kinds = [k for k, _ in events]
    assert kinds[0] == "chat" and "frame" in kinds and kinds[-1] == "done", kinds
    done = events[-1][1]
    assert done["answer"] and done["sources"] and done["sources"][0]["text"]
    chat = done["session"]
    assert chat.startswith("web.owner.")
    assert chat in [c["id"] for c in owner.get("/api/chats").json()["sessions"]]
    person = Ui(person_link(a, "Neighbour", "trusted"))
    try:
        assert chat not in [c["id"] for c in person.get("/api/chats").json()["sessions"]]
        assert person.get("/api/chat", params={"session": chat}).status_code == 404
        assert person.post("/api/chats/rename", json={"session": chat, "title": "mine"}).status_code == 404
        assert person.post("/api/chats/delete", json={"session": chat}).status_code == 404
        into = person.post("/api/ask", json={"question": "And the garden?", "session": chat})
        assert into.status_code == 404  # nobody writes into another's chat
        mine = ask(person, "Which seeds are sown in spring in the garden?")
        assert mine[-1][0] == "done", mine
        assert all(s["corpus"] != "personal" for s in mine[-1][1]["sources"])
        refused = person.post("/api/ask", json={"question": "x", "corpora": ["personal"]})
        assert refused.status_code == 403
    finally:
        person.close()
    assert owner.post("/api/chats/rename", json={"session": chat, "title": "Boiler"}).status_code == 200
    assert owner.post("/api/chats/delete", json={"session": chat}).status_code == 200
    assert chat not in [c["id"] for c in owner.get("/api/chats").json()["sessions"]]


# -- pages, headers, mesh ----------------------------------------------------------------
def test_every_answer_carries_the_security_headers(mesh: LocalMesh, owner: Ui) -> None:
    a, _ = nodes(mesh)
    with httpx.Client(base_url=ui_url(a)) as stranger:
        answers = [
            owner.get("/ask"),
            owner.get("/api/session"),
            owner.get("/static/app.css"),
            stranger.get("/library"),
            stranger.get("/login"),
        ]
    for response in answers:
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "object-src 'none'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"


def test_pages_have_no_inline_script_or_style(owner: Ui) -> None:
    for page in ("/ask", "/library", "/mesh", "/login"):
        html = owner.get(page).text
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), page
        assert " style=" not in html and "<style" not in html and " on" + "click=" not in html, page


def test_static_scripts_never_put_markup_from_data_into_the_page() -> None:
    static = ROOT / "hearthnet" / "frontends" / "http" / "static"
    for script in static.glob("*.js"):
        text = script.read_text()
        for sink in (
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
        ):
            assert sink not in text, f"{script.name} uses {sink}"


def test_mesh_lists_every_member_with_its_level_and_figures(mesh: LocalMesh, owner: Ui) -> None:
    a, b = nodes(mesh)
    data = owner.get("/api/mesh").json()
    by_id = {n["node_id"]: n for n in data["nodes"]}
    assert by_id[a.node_id]["level"] == "anchor" and by_id[a.node_id]["self"]
    assert by_id[b.node_id]["level"] == "trusted" and by_id[b.node_id]["online"]
    assert by_id[b.node_id]["name"] == "b"
    assert "node.info@1.0" in by_id[b.node_id]["capabilities"]
    stats = by_id[a.node_id]["stats"]
    assert stats["node.status@1.0"]["calls"] >= 1 and "p50_ms" in stats["node.status@1.0"]
    kinds = [e["type"] for e in owner.get("/api/events").json()["events"]]
    assert "community.created" in kinds and "member.invited" in kinds


def test_ui_command_refuses_a_stopped_node_and_a_disabled_ui(tmp_path: Path) -> None:
    m = LocalMesh(tmp_path)
    node = m.add("lonely")
    stopped = node.cli("ui", check=False)
    assert stopped.returncode == 1 and stopped.stderr.startswith("hearthnet: ")
    node.extra_env["HEARTHNET_UI"] = "0"
    disabled = node.cli("ui", check=False)
    assert disabled.returncode == 1 and "turned off" in disabled.stderr


def test_nodes_on_one_machine_need_no_ui_configuration_and_a_named_port_taken_fails(tmp_path: Path) -> None:
    m = LocalMesh(tmp_path)
    try:
        one, two = m.add("one"), m.add("two")
        for node in (one, two):
            node.start()
        for node in (one, two):
            node.wait_ready()
        urls = {ui_url(one), ui_url(two)}
        assert len(urls) == 2  # the default port, then the next free one
        for url in urls:
            assert httpx.get(url + "/login").status_code == 200
        port = ui_url(one).rsplit(":", 1)[1]
        three = m.add("three", env={"HEARTHNET_UI_LISTEN": f"127.0.0.1:{port}"})
        three.start()
        assert three.process is not None
        assert three.process.wait(timeout=60) == 1
        assert f"the web UI cannot listen on 127.0.0.1:{port}: the port is taken" in three.log_tail()
    finally:
        m.close()


# -- the owner's level is the node's ---------------------------------------------------------
def test_the_owner_of_a_member_node_acts_as_a_member(mesh: LocalMesh) -> None:
    c = mesh.nodes["c"]
    told = c.cli_json("ui")
    assert told["level"] == "member" and told["revoked"] is None
    assert "You act as member: this node is a member of its community" in c.cli("ui").stdout
    ui = Ui(owner_link(c))
    try:
        me = ui.get("/api/session").json()
        assert (me["level"], me["owner"], me["revoked"]) == ("member", True, None)
        assert "community.invite" not in me["may"] and "rag.ingest" not in me["may"]
        assert 'id="invite-level"' not in ui.get("/mesh").text  # no buttons that would fail
        refused = ui.post("/api/mesh/invite", json={"node_id": c.node_id, "level": "member"})
        assert refused.status_code == 403 and refused.json()["error"] == "unauthorized"
    finally:
        ui.close()
    a, b = nodes(mesh)
    assert a.cli_json("ui")["level"] == "anchor" and b.cli_json("ui")["level"] == "trusted"


def test_used_and_expired_owner_links_are_not_listed(mesh: LocalMesh) -> None:
    a, _ = nodes(mesh)
    used = Ui(owner_link(a))  # signed in: the link is spent, the browser stays signed in
    fresh = token_of(owner_link(a))
    listed = a.cli_json("ui", "token", "list")["tokens"]
    links = [t for t in listed if t["kind"] == "owner-link"]
    assert links and all(t["used"] is None for t in links)  # only those that still sign in
    assert "unused, valid until" in a.cli("ui", "token", "list").stdout
    everything = a.cli_json("ui", "token", "list", "--all")["tokens"]
    spent = [t for t in everything if t["kind"] == "owner-link" and t["used"] is not None]
    assert spent and not {t["id"] for t in spent} & {t["id"] for t in listed}
    assert used.get("/api/session").status_code == 200  # listing pruned nothing still in use
    with httpx.Client(base_url=ui_url(a)) as http:
        assert http.post("/api/login", json={"token": fresh}).status_code == 200
    used.close()


def test_a_revoked_nodes_ui_says_it_was_revoked(mesh: LocalMesh) -> None:
    a, c = mesh.nodes["a"], mesh.nodes["c"]
    a.cli("member", "revoke", c.node_id, "--reason", "test")
    wait_for(lambda: c.status()["revoked"], timeout=30, what="c to learn it was revoked")
    told = c.cli_json("ui")
    assert told["level"] == "member"
    assert told["revoked"].startswith(f"this node was revoked from the community by {a.node_id} at ")
    assert "it can no longer reach other members" in c.cli("ui").stdout
    ui = Ui(owner_link(c))
    try:
        assert ui.get("/api/session").json()["revoked"] == told["revoked"]
        page = ui.get("/ask").text
        assert '<p id="revoked" class="banner bad" role="alert">This node was revoked' in page
    finally:
        ui.close()
    if browser_missing() is None:  # what a person sees: the banner on top of the page
        with chromium() as driver:
            driver.get("about:blank")
            driver.get(owner_link(c))
            wait_for(lambda: driver.current_url.endswith("/ask"), timeout=30, what="the sign-in")
            banner = driver.find_element("id", "revoked")
            assert banner.is_displayed() and banner.text.startswith(
                "This node was revoked from the community"
            )
            screenshot(driver, "revoked_node_banner")

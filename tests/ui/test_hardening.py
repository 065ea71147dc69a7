"""What an attacker tried on the node's HTTP server, against real nodes (issue 29).

A: founder (anchor) with the web UI; its ``[ui]`` caps lowered so the floods stay small and
fast (256 connections, 64 per client address, 2 s for headers and body pauses).  B: a member,
the peer whose bus calls must keep being answered.  Neither embeds nor serves RAG: every
request here is refused or answered before a model would be asked.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import selectors
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from hearthnet.config import UiConfig
from hearthnet.frontends.http.connections import connection_limits
from hearthnet.testing import LocalMesh, MeshNode
from tests.ui.harness import (
    Ui,
    chromium,
    owner_link,
    person_link,
    screenshot,
    skip_without_browser,
    token_of,
    ui_url,
)

LIGHT = {"HEARTHNET_UI_LISTEN": "127.0.0.1:0", "HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"}
CAPS = {"max_connections": 256, "max_connections_per_client": 64}
HEADER_SECONDS = 2.0
BODY_SECONDS = 2.0
SLACK_SECONDS = 30.0
"""What a loaded machine may add to a timer of the node before a test calls it a hang."""
FLOOD = 3000


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("ui-hardening"))
    try:
        a = m.add("a", env=LIGHT)
        config = a.home / "config.toml"
        extra = "".join(f"{k} = {v}\n" for k, v in CAPS.items())
        extra += f"header_timeout_seconds = {HEADER_SECONDS}\nbody_timeout_seconds = {BODY_SECONDS}\n"
        config.write_text(config.read_text().replace("[ui]\n", "[ui]\n" + extra))
        b = m.add("b", env=LIGHT)
        m.found(a)
        m.invite(a, b, "member")
        m.wait_full_mesh(timeout=90)
        yield m
    finally:
        m.close()


@pytest.fixture(scope="module")
def owner(mesh: LocalMesh) -> Iterator[Ui]:
    ui = Ui(owner_link(mesh.nodes["a"]))
    yield ui
    ui.close()


@pytest.fixture(scope="module")
def api_key(mesh: LocalMesh) -> str:
    return token_of(person_link(mesh.nodes["a"], "program", "member"))


def _port(node: MeshNode) -> int:
    return int(ui_url(node).rsplit(":", 1)[1])


# -- deep JSON: 400 in each door's shape -----------------------------------------------------------
def _deep(depth: int, inside: str = "1") -> str:
    return "[" * depth + inside + "]" * depth


@pytest.mark.parametrize("depth", [40, 30_000])
def test_deep_json_is_refused_in_the_web_uis_shape(owner: Ui, depth: int) -> None:
    for path, body in (
        ("/api/ask", '{"question": "q", "corpora": ' + _deep(depth) + "}"),
        ("/api/chats/rename", '{"session": "s", "title": ' + _deep(depth) + "}"),
    ):
        response = owner.post(path, content=body.encode(), headers={"Content-Type": "application/json"})
        assert response.status_code == 400, (path, response.status_code, response.text[:200])
        doc = response.json()
        assert doc["error"] == "bad_request" and "nested more than 32 levels" in doc["message"], doc


@pytest.mark.parametrize("depth", [40, 100_000])
def test_deep_json_is_refused_in_openai_and_json_rpc_shape(mesh: LocalMesh, api_key: str, depth: int) -> None:
    auth = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    with httpx.Client(base_url=ui_url(mesh.nodes["a"]), timeout=60) as http:
        for path, body in (
            ("/v1/chat/completions", '{"model": "m", "messages": ' + _deep(depth) + "}"),
            ("/v1/embeddings", '{"model": "m", "input": ' + _deep(depth, '"x"') + "}"),
        ):
            response = http.post(path, content=body.encode(), headers=auth)
            assert response.status_code == 400, (path, response.status_code, response.text[:200])
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and "nested more than 32" in error["message"]
        rpc = '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ' + _deep(depth) + "}"
        response = http.post("/mcp", content=rpc.encode(), headers={**auth, "Accept": "application/json"})
        assert response.status_code == 400, response.text[:200]
        doc = response.json()
        assert doc["jsonrpc"] == "2.0" and doc["id"] is None, doc
        assert doc["error"]["code"] == -32700 and "nested more than 32" in doc["error"]["message"]


# -- slowloris ---------------------------------------------------------------------------------------
@dataclass
class Flood:
    """Client sockets that sent part of a request's headers, and what each got back."""

    sockets: dict[int, socket.socket] = field(default_factory=dict)
    opened: dict[int, float] = field(default_factory=dict)
    closed: dict[int, float] = field(default_factory=dict)
    answers: dict[int, bytes] = field(default_factory=dict)

    def open(self, port: int, source: str, count: int, request: bytes) -> None:
        """``count`` connections from ``source`` (a loopback address), each sending ``request``
        (bounded: every connect and send waits at most a minute)."""
        pending: list[socket.socket] = []
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((source, 0))
            s.setblocking(False)
            code = s.connect_ex(("127.0.0.1", port))
            assert code in (0, errno.EINPROGRESS), os.strerror(code)
            pending.append(s)
        with selectors.DefaultSelector() as sel:
            for s in pending:
                sel.register(s, selectors.EVENT_WRITE)
            deadline = time.monotonic() + 60
            left = len(pending)
            while left and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=1.0):
                    s = key.fileobj  # type: ignore[assignment]
                    sel.unregister(s)
                    left -= 1
                    assert isinstance(s, socket.socket)
                    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                        try:
                            s.send(request)
                        except OSError:
                            pass  # already refused and closed by the server: counted below
                    self.sockets[s.fileno()] = s
                    self.opened[s.fileno()] = time.monotonic()
            assert left == 0, f"{left} connects still pending after a minute"

    def wait_closed(self, deadline: float) -> None:
        """Until the server closed every socket (EOF or reset), or ``deadline`` passes."""
        with selectors.DefaultSelector() as sel:
            for fd, s in self.sockets.items():
                if fd not in self.closed:
                    sel.register(s, selectors.EVENT_READ)
            while len(self.closed) < len(self.sockets) and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=1.0):
                    s = key.fileobj
                    assert isinstance(s, socket.socket)
                    try:
                        data = s.recv(4096)
                    except OSError:
                        data = b""
                    if data:
                        self.answers[s.fileno()] = self.answers.get(s.fileno(), b"") + data
                        continue
                    self.closed[s.fileno()] = time.monotonic()
                    sel.unregister(s)

    def status_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for fd in self.sockets:
            head = self.answers.get(fd, b"")[:12].decode("latin-1") or "none"
            out[head] = out.get(head, 0) + 1
        return out

    def close(self) -> None:
        for s in self.sockets.values():
            s.close()


def _raise_own_file_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"this test opens {needed} sockets; the hard limit of open files is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _open_fds(node: MeshNode) -> int:
    assert node.process is not None
    return len(os.listdir(f"/proc/{node.process.pid}/fd"))


def _half_open(port: int) -> bytes:
    return f"GET /ask HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: slow\r\n".encode()


def test_half_open_requests_are_shed_while_the_node_keeps_answering(mesh: LocalMesh, owner: Ui) -> None:
    a, b = mesh.nodes["a"], mesh.nodes["b"]
    _raise_own_file_limit(FLOOD + 1024)
    port = _port(a)
    before = _open_fds(a)
    flood = Flood()
    try:
        flood.open(port, "127.0.0.2", FLOOD, _half_open(port))
        held = _open_fds(a) - before
        # Meanwhile the node answers its CLI (control socket), a peer's bus call, and a page.
        assert a.status()["node_id"] == a.node_id
        info = b.cli_json("call", "node.info", "--provider", a.node_id, timeout=60)
        assert info["output"]["node_id"] == a.node_id, info
        assert owner.get("/api/session").json()["owner"] is True
        flood.wait_closed(max(flood.opened.values()) + HEADER_SECONDS + SLACK_SECONDS)
        counts = flood.status_counts()
        longest = max((flood.closed[fd] - flood.opened[fd] for fd in flood.closed), default=0.0)
    finally:
        flood.close()
    assert len(flood.closed) == FLOOD, f"{FLOOD - len(flood.closed)} half-open requests still held"
    assert held <= CAPS["max_connections_per_client"] + 16, f"the node held {held} more descriptors"
    assert counts.get("HTTP/1.1 408", 0) <= CAPS["max_connections_per_client"], counts
    assert counts.get("HTTP/1.1 503", 0) >= FLOOD - CAPS["max_connections_per_client"], counts
    assert longest <= HEADER_SECONDS + SLACK_SECONDS, longest
    busy = next(v for v in flood.answers.values() if v.startswith(b"HTTP/1.1 503"))
    assert json.loads(busy.split(b"\r\n\r\n", 1)[1])["error"] == "capacity_exceeded"
    assert owner.get("/api/session").status_code == 200


def test_connections_past_the_total_cap_are_refused_at_once(mesh: LocalMesh, owner: Ui) -> None:
    a = mesh.nodes["a"]
    _raise_own_file_limit(1024 + 1024)
    port = _port(a)
    flood = Flood()
    try:
        for i in range(20):  # 20 addresses x 30: under the per-client cap, over the total one
            flood.open(port, f"127.0.1.{i + 1}", 30, _half_open(port))
        assert a.status()["node_id"] == a.node_id  # the control socket answers meanwhile
        peer = mesh.nodes["b"].cli_json("call", "node.info", "--provider", a.node_id, timeout=60)
        assert peer["output"]["node_id"] == a.node_id  # and so does the bus
        flood.wait_closed(max(flood.opened.values()) + HEADER_SECONDS + SLACK_SECONDS)
        counts = flood.status_counts()
    finally:
        flood.close()
    assert len(flood.closed) == 600
    assert counts.get("HTTP/1.1 408", 0) <= CAPS["max_connections"], counts
    assert counts.get("HTTP/1.1 503", 0) >= 600 - CAPS["max_connections"], counts


def test_a_body_that_stops_coming_is_cut_off(mesh: LocalMesh) -> None:
    a = mesh.nodes["a"]
    port = _port(a)
    flood = Flood()
    request = (
        f"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n" + '{"token": "'
    ).encode()
    failures = _log_count(a, "http_failed")
    try:
        flood.open(port, "127.0.0.3", 1, request)
        flood.wait_closed(max(flood.opened.values()) + BODY_SECONDS + SLACK_SECONDS)
    finally:
        flood.close()
    assert len(flood.closed) == 1, "a stalled body held its connection"
    assert a.status()["node_id"] == a.node_id  # the log is written by now
    assert _log_count(a, "http_failed") == failures  # a client cut off is no failure of the node


def _log_count(node: MeshNode, event: str) -> int:
    assert node.log_path is not None
    return node.log_path.read_text(errors="replace").count(f'"event": "{event}"')


def test_the_default_caps_leave_the_node_its_descriptors(mesh: LocalMesh) -> None:
    a = mesh.nodes["a"]
    assert a.process is not None
    limits = Path(f"/proc/{a.process.pid}/limits").read_text()
    line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    assert soft == hard, f"the node left its soft limit of open files below the hard one: {line}"
    for nofile in (256, 1024, 4096, 1 << 20, int(soft) if soft.isdigit() else 1 << 20):
        caps = connection_limits(UiConfig(), nofile)
        assert caps.max_per_client <= caps.max_connections <= nofile // 2 < nofile, (nofile, caps)


# -- login CSRF ----------------------------------------------------------------------------------
class _Foreign:
    """A page of another site (``localhost`` on its own port, the UI being ``127.0.0.1``) that
    sends the browser to a sign-in link, as an attacker's page would."""

    def __init__(self, link: str) -> None:
        import http.server
        import threading

        page = f'<!doctype html><title>cats</title><script>location.href = "{link}";</script>'.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://localhost:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _page_fetch(driver: Any, method: str, path: str) -> tuple[int, Any]:
    """A request the page itself makes (its cookie, its CSRF token)."""
    script = """
        const [method, path, done] = arguments;
        const meta = document.querySelector('meta[name="hn-csrf"]');
        const headers = meta ? {"X-CSRF-Token": meta.content} : {};
        fetch(path, {method, headers}).then(async (r) => done([r.status, await r.text()]));
    """
    status, text = driver.execute_async_script(script, method, path)
    return int(status), json.loads(text) if text.startswith("{") else text


def _shown(driver: Any, selector: str) -> str:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        found = driver.find_elements(By.CSS_SELECTOR, selector)
        return str(found[0].text) if found and found[0].is_displayed() else ""
    except StaleElementReferenceException:  # the page navigated meanwhile
        return ""


def _wait(driver: Any, condition: Any, what: str, timeout: float = 60) -> Any:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)
    except TimeoutException:
        screenshot(driver, "login-csrf-timeout")
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}") from None


def test_a_sign_in_link_sent_by_another_site_never_replaces_the_owner(mesh: LocalMesh) -> None:
    skip_without_browser()
    a = mesh.nodes["a"]
    base = ui_url(a)
    with chromium() as driver:
        driver.set_script_timeout(30)
        driver.get(owner_link(a))  # the first sign-in, as 'hearthnet ui --open' does it: no prompt
        _wait(driver, lambda d: d.current_url == base + "/ask", "the owner's sign-in to land on Ask")
        assert _page_fetch(driver, "GET", "/api/session")[1]["owner"] is True

        attacker = _Foreign(person_link(a, "Mallory", "member"))
        try:
            driver.get(attacker.url)
            _wait(driver, lambda d: _shown(d, "#login-switch"), "the sign-in page to ask")
            screenshot(driver, "login-csrf-asks")
            assert "You are signed in as owner (anchor)." in _shown(driver, "#login-current")
            assert "would sign you in as Mallory (member) instead" in _shown(driver, "#login-would")
            assert "another site" in _shown(driver, "#login-origin")
            status, me = _page_fetch(driver, "GET", "/api/session")
            assert status == 200 and me["owner"] is True and me["name"] == "owner", me
            driver.find_element("css selector", "#login-switch").click()  # the person's own choice
            _wait(driver, lambda d: d.current_url == base + "/ask", "the switch to land on Ask")
            status, me = _page_fetch(driver, "GET", "/api/session")
            assert (me["name"], me["level"], me["owner"]) == ("Mallory", "member", False), me

            # Signed out, a link another site sends still asks first.
            assert _page_fetch(driver, "POST", "/api/logout")[0] == 200
            driver.get(attacker.url)
            _wait(driver, lambda d: _shown(d, "#login-switch"), "the sign-in page to ask again")
            assert "not signed in" in _shown(driver, "#login-current")
            assert "another site" in _shown(driver, "#login-origin")
            assert _page_fetch(driver, "GET", "/api/session")[0] == 401
        finally:
            attacker.close()


def test_the_login_api_never_replaces_a_live_session_unasked(mesh: LocalMesh, owner: Ui) -> None:
    a = mesh.nodes["a"]
    link = person_link(a, "Eve", "member")
    preview = owner.post("/api/login/preview", json={"token": token_of(link)})
    assert preview.json() == {
        "link": {"name": "Eve", "level": "member"},
        "current": {"name": "owner", "level": "anchor"},
    }
    refused = owner.post("/api/login", json={"token": token_of(link)})
    assert refused.status_code == 409 and "signed in as owner" in refused.json()["message"]
    assert owner.get("/api/session").json()["owner"] is True
    used = owner_link(a)
    assert owner.post("/api/login/preview", json={"token": token_of(used)}).status_code == 200
    with httpx.Client(base_url=ui_url(a)) as http:  # a preview used nothing: the link still works
        assert http.post("/api/login", json={"token": token_of(used)}).status_code == 200
    assert owner.post("/api/login/preview", json={"token": token_of(used)}).status_code == 401


# -- what held, kept as regression tests -------------------------------------------------------------
def test_an_owner_link_raced_by_20_redeems_signs_in_exactly_one(mesh: LocalMesh) -> None:
    import threading

    a = mesh.nodes["a"]
    token = token_of(owner_link(a))
    start = threading.Barrier(20)
    codes: list[int] = []
    lock = threading.Lock()

    def redeem() -> None:
        with httpx.Client(base_url=ui_url(a), timeout=60) as http:
            start.wait(timeout=60)
            code = http.post("/api/login", json={"token": token}).status_code
        with lock:
            codes.append(code)

    threads = [threading.Thread(target=redeem) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(codes) == [200] + [401] * 19, codes


PAYLOAD = "<img src=x onerror=alert(1)>"


def test_a_name_holding_markup_is_shown_as_text(mesh: LocalMesh) -> None:
    skip_without_browser()
    a = mesh.nodes["a"]
    link = person_link(a, PAYLOAD, "member")
    with httpx.Client(base_url=ui_url(a), timeout=60) as http:  # the server's own HTML escapes it
        assert http.post("/api/login", json={"token": token_of(link)}).status_code == 200
        page = http.get("/mesh").text
        assert PAYLOAD not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    with chromium() as driver:
        driver.set_script_timeout(30)
        driver.get(link)
        _wait(driver, lambda d: d.current_url.endswith("/ask"), "the sign-in to land on Ask")
        for path in ("/ask", "/library", "/mesh"):
            driver.get(ui_url(a) + path)
            _wait(driver, lambda d: _shown(d, ".who"), f"the header of {path}")
            assert PAYLOAD in _shown(driver, ".who"), path
            images = driver.execute_script("return document.querySelectorAll('img').length")
            assert images == 0, f"{path}: {images} image elements"
            try:
                alert = driver.switch_to.alert.text
            except Exception:
                alert = None
            assert alert is None, f"{path}: an alert showed {alert!r}"
        screenshot(driver, "xss-name-as-text")

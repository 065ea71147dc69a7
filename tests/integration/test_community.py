"""Three real node processes on 127.0.0.1 form a community through the CLI and defend it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hearthnet.client import AsyncClient
from hearthnet.errors import CapacityExceeded, Unauthorized
from hearthnet.identity import Identity, load_identity
from hearthnet.testing import LocalMesh, MeshNode, wait_for
from hearthnet.transport import initiate_link, open_link
from hearthnet.wire.frames import HEADER

NO_MODELS = {"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"}


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("community"), env=None)
    m.env.update(NO_MODELS)
    try:
        a, b, c = m.add("a"), m.add("b"), m.add("c")
        m.found(a, "hearth")
        m.invite(a, b, "trusted")
        m.invite(a, c, "member")
        m.wait_full_mesh(timeout=60)
        yield m
    finally:
        m.close()


def nodes(mesh: LocalMesh) -> tuple[MeshNode, MeshNode, MeshNode]:
    return mesh.nodes["a"], mesh.nodes["b"], mesh.nodes["c"]


def port_of(node: MeshNode) -> int:
    address: str = node.status()["addresses"][0]
    return int(address.rpartition(":")[2])


def event_ids(node: MeshNode) -> list[str]:
    return [e["event_id"] for e in node.cli_json("events")["events"]]


def test_each_node_sees_the_other_two_with_their_levels(mesh: LocalMesh) -> None:
    a, b, c = nodes(mesh)
    levels = {a.node_id: "anchor", b.node_id: "trusted", c.node_id: "member"}
    for node in (a, b, c):
        status = node.status()
        assert status["level"] == levels[node.node_id]
        peers = {p["node_id"]: p["level"] for p in status["peers"]}
        assert peers == {n: lvl for n, lvl in levels.items() if n != node.node_id}
        # Keepalives (every 10 s on an idle link) keep each peer heard from well within dead_after (30 s).
        assert all(0 <= p["last_heard_s"] < 30 for p in status["peers"])
        human = node.cli("status").stdout
        assert all(f"{n}  {lvl}" in human for n, lvl in peers.items()) and "heard" in human
        remote_caps = {(c["capability"], c["node"]) for c in status["capabilities"] if not c["local"]}
        assert {("node.ping@1.0", n) for n in peers} <= remote_caps
    # every node holds the same log, in the same replay order
    assert event_ids(a) == event_ids(b) == event_ids(c)


def test_calls_reach_each_peer(mesh: LocalMesh) -> None:
    a, b, c = nodes(mesh)
    for caller in (a, b, c):
        for target in (a, b, c):
            out = caller.cli_json("call", "node.ping", "--provider", target.node_id)
            assert out["provider"] == target.node_id and out["output"]["pong"] is True


def test_plain_member_cannot_invite_or_revoke(mesh: LocalMesh) -> None:
    a, b, c = nodes(mesh)
    before = event_ids(a)
    outsider = Identity.generate().node_id
    for args in (("invite", outsider), ("member", "revoke", b.node_id), ("member", "promote", c.node_id)):
        proc = c.cli(*args, check=False)
        assert proc.returncode != 0
        assert proc.stderr.startswith("hearthnet: unauthorized:"), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    assert event_ids(a) == before


@pytest.mark.anyio
async def test_uninvited_key_cannot_complete_a_handshake(mesh: LocalMesh) -> None:
    a, _, _ = nodes(mesh)
    community = a.status()["community_id"]
    stranger = Identity.generate()
    with pytest.raises(Unauthorized):
        await open_link(
            "127.0.0.1", port_of(a), identity=stranger, community_id=community, admit=lambda _: None
        )
    # The node is unharmed and still serves its members.
    assert a.cli_json("call", "node.ping")["output"]["pong"] is True


def _probe_identity(mesh: LocalMesh) -> Identity:
    """A member whose key this test holds (its home exists, its node does not run)."""
    if "probe" not in mesh.nodes:
        probe = mesh.add("probe")
        mesh.invite(mesh.nodes["a"], probe, "member", start=False)
        wait_for(
            lambda: (
                probe.node_id
                in {e["data"].get("node_id") for e in mesh.nodes["b"].cli_json("events")["events"]}
            ),
            timeout=30,
            what="probe's invite to gossip",
        )
    return load_identity(mesh.nodes["probe"].home / "identity.key")


async def _assert_link_closed_by_peer(link: Any) -> None:
    async with link:  # then closed on our side too (a link that saw EndOfStream is still open)
        with anyio.fail_after(10), pytest.raises(Exception) as info:
            while True:
                await link.receive()
    assert type(info.value).__name__ in ("EndOfStream", "ProtocolError", "Partition")


@pytest.mark.anyio
async def test_oversized_frame_closes_the_link_and_changes_nothing(mesh: LocalMesh) -> None:
    a, b, _ = nodes(mesh)
    identity = _probe_identity(mesh)
    before = event_ids(a)
    link = await open_link(
        "127.0.0.1",
        port_of(a),
        identity=identity,
        community_id=a.status()["community_id"],
        admit=lambda _: None,
    )
    await link._stream.send(HEADER.pack(64 * 1024 * 1024) + b"x" * 1024)
    await _assert_link_closed_by_peer(link)
    assert event_ids(a) == before
    assert b.cli_json("call", "node.ping", "--provider", a.node_id)["output"]["pong"] is True


@pytest.mark.anyio
async def test_tampered_ciphertext_closes_the_link(mesh: LocalMesh) -> None:
    a, b, _ = nodes(mesh)
    identity = _probe_identity(mesh)
    link = await open_link(
        "127.0.0.1",
        port_of(a),
        identity=identity,
        community_id=a.status()["community_id"],
        admit=lambda _: None,
    )
    # A well-formed frame whose ciphertext does not authenticate under the session key.
    forged = bytes(48)
    await link._stream.send(HEADER.pack(len(forged)) + forged)
    await _assert_link_closed_by_peer(link)
    assert b.cli_json("call", "node.ping", "--provider", a.node_id)["output"]["pong"] is True


class _Recorder(anyio.abc.ByteStream):
    """Wraps a TCP stream and keeps every byte the initiator sent."""

    def __init__(self, inner: anyio.abc.ByteStream) -> None:
        self.inner = inner
        self.sent = bytearray()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self.inner.receive(max_bytes)

    async def send(self, item: bytes) -> None:
        self.sent += item
        await self.inner.send(item)

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.anyio
async def test_replayed_handshake_does_not_open_a_session(mesh: LocalMesh) -> None:
    a, _, _ = nodes(mesh)
    identity = _probe_identity(mesh)
    community = a.status()["community_id"]
    port = port_of(a)
    recorder = _Recorder(await anyio.connect_tcp("127.0.0.1", port))
    link = await initiate_link(
        recorder, identity=identity, community_id=community, admit=lambda _: None, remote_address="a"
    )
    recorded = bytes(recorder.sent)
    await link.aclose()
    # Replay the honest initiator's exact bytes on a fresh connection: the responder's fresh
    # ephemeral key and nonce change the transcript, so the old signature cannot verify.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(recorded)
        s.settimeout(10)
        received = b""
        while True:
            data = s.recv(65536)
            if not data:
                break
            received += data
    # Whatever came back (its hello, maybe a refusal), the responder then closed the connection.
    assert received
    assert a.cli_json("call", "node.ping")["output"]["pong"] is True


@pytest.mark.anyio
async def test_overload_answers_capacity_exceeded_with_retry_hint(mesh: LocalMesh) -> None:
    _, b, c = nodes(mesh)
    client = AsyncClient(c.home, retry_capacity=False)  # the node's own answer, as it comes
    outcomes: list[str] = []
    hints: list[int] = []

    async def one() -> None:
        try:
            await client.call("node.echo", input={"delay_ms": 1500}, provider=b.node_id, timeout=10)
            outcomes.append("ok")
        except CapacityExceeded as exc:
            outcomes.append(exc.code)
            hints.append(exc.retry_after_ms or 0)

    async with anyio.create_task_group() as tg:
        for _ in range(48):
            tg.start_soon(one)
    assert outcomes.count("ok") == 32  # node.echo's max_concurrent
    assert outcomes.count("capacity_exceeded") == 16
    assert all(h > 0 for h in hints)
    out = b.cli_json("call", "node.stats")["output"]
    stats = out["capabilities"]["node.echo@1.0"]
    assert stats["errors_by_code"].get("capacity_exceeded", 0) >= 16

    # A client that retries (the default, and the CLI's) gets every call through: slower, not failed.
    retrying = AsyncClient(c.home)
    served: list[str] = []

    async def patient() -> None:
        out = await retrying.call("node.echo", input={"delay_ms": 300}, provider=b.node_id, timeout=30)
        served.append(out.provider)

    async with anyio.create_task_group() as tg:
        for _ in range(48):
            tg.start_soon(patient)
    assert served == [b.node_id] * 48
    after = b.cli_json("call", "node.stats")["output"]["capabilities"]["node.echo@1.0"]
    assert after["errors_by_code"]["capacity_exceeded"] > stats["errors_by_code"]["capacity_exceeded"]
    # The node process reports its own memory (a running node with no models: tens of MB).
    proc = out["process"]
    assert b.process is not None
    assert 10 < proc["rss_mb"] <= proc["peak_rss_mb"] + 1 and proc["threads"] >= 1
    assert abs(proc["rss_mb"] - _vm_rss_mb(b.process.pid)) < 64


def _vm_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def _typo(node_id: str) -> str:
    i = len(node_id) // 2
    return node_id[:i] + ("A" if node_id[i] != "A" else "B") + node_id[i + 1 :]


def _fails(node: MeshNode, *args: str) -> str:
    proc = node.cli(*args, check=False)
    assert proc.returncode == 1 and proc.stdout == "", proc
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("hearthnet: "), proc.stderr
    return proc.stderr.strip()


def test_member_commands_act_only_on_members_and_in_their_direction(mesh: LocalMesh) -> None:
    """A typo'd id was "revoked" (and barred for ever) while the member stayed in; ``promote
    --level member`` demoted a trusted member; inviting a member named an internal event."""
    a, b, c = nodes(mesh)
    before = event_ids(a)
    typo = _typo(c.node_id)
    err = _fails(a, "member", "revoke", typo)
    assert err == f"hearthnet: bad_request: {typo} is not a member of this community"
    err = _fails(a, "member", "promote", typo, "--level", "trusted")
    assert err == f"hearthnet: bad_request: {typo} is not a member of this community"
    err = _fails(a, "member", "promote", b.node_id, "--level", "member")
    assert f"run 'hearthnet member demote {b.node_id} --level member'" in err
    err = _fails(a, "invite", c.node_id, "--level", "trusted")
    assert "is already a member (member)" in err and "'hearthnet member promote" in err
    assert "member.promoted" not in err
    usage = a.cli("member", "demote", b.node_id, check=False)  # argparse: a usage error, rc 2
    assert usage.returncode == 2 and "required: --level" in usage.stderr and "Traceback" not in usage.stderr
    assert event_ids(a) == before
    assert c.node_id in a.peer_ids() and b.status()["level"] == "trusted"
    # demote, then promote back: each a signed event every member applies
    assert a.cli_json("member", "demote", b.node_id, "--level", "member")["level"] == "member"
    wait_for(lambda: b.status()["level"] == "member", timeout=10, what="b to see its demotion")
    wait_for(
        lambda: {p["node_id"]: p["level"] for p in c.status()["peers"]}.get(b.node_id) == "member",
        timeout=10,
        what="c to see b demoted",
    )
    assert "demoted" not in a.cli("member", "promote", b.node_id, "--level", "trusted").stderr
    wait_for(lambda: b.status()["level"] == "trusted", timeout=10, what="b to be trusted again")
    types = [e["event_type"] for e in a.cli_json("events")["events"]][-2:]
    assert types == ["member.demoted", "member.promoted"]


def test_a_member_that_never_joined_gets_a_fresh_token_and_joins_with_it(mesh: LocalMesh) -> None:
    """QA row 18: a node invited but never joined (its token lost) could not be invited again:
    "already a member … change its level with 'hearthnet member promote …'"."""
    a, _, _ = nodes(mesh)
    late = mesh.add("late")
    first = a.cli_json("invite", late.node_id)  # the token its owner then loses
    assert first["reissued"] is False
    before = event_ids(a)
    again = a.cli("invite", late.node_id)
    assert again.returncode == 0, again.stderr
    token = again.stdout.strip()
    assert token.startswith("hn1.") and token != first["token"]
    assert again.stderr == (
        f"hearthnet: {late.node_id} is a member already (member): this is a fresh token for it; "
        "its invitation stands, nothing new was signed\n"
    )
    assert event_ids(a) == before  # no second invite in the log
    err = _fails(a, "invite", late.node_id, "--level", "trusted")
    assert f"to make it trusted run 'hearthnet member promote {late.node_id} --level trusted'" in err
    late.cli("join", token)
    late.start()
    late.wait_ready()
    wait_for(lambda: a.node_id in late.peer_ids(), timeout=30, what="the late node to reach a")
    assert late.status()["level"] == "member"
    late.stop()


def test_status_shows_where_peers_listen_in_aligned_columns(mesh: LocalMesh) -> None:
    """QA: ``status`` showed an inbound peer's source port (127.0.0.1:34218), not its listen address."""
    a, b, c = nodes(mesh)
    listening = {n.node_id: set(n.status()["addresses"]) for n in (a, b, c)}
    for node in (a, b, c):
        for peer in node.status()["peers"]:
            if peer["node_id"] in listening:
                assert peer["address"] in listening[peer["node_id"]], (node.name, peer)
    text = a.cli("status").stdout
    assert all(p in text for p in listening[b.node_id] | listening[c.node_id])


def test_a_plain_member_is_told_an_ingest_needs_a_trusted_member(mesh: LocalMesh, tmp_path: Path) -> None:
    """QA H: a member's ingest said "unauthorized: file.put needs trust level trusted; caller is member"."""
    _, _, c = nodes(mesh)
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nThe spare key is under the blue pot.\n")
    err = _fails(c, "ingest", str(note), "--corpus", "family")
    assert err == (
        "hearthnet: unauthorized: ingesting into corpus family needs a trusted member: this node is only "
        f"a member (ask an anchor to promote it: 'hearthnet member promote {c.node_id} --level trusted')"
    )


def test_without_a_model_llm_chat_says_how_to_add_one(mesh: LocalMesh) -> None:
    """QA O: "not_found: no provider of llm.chat@1.0 for params {}"."""
    a, _, _ = nodes(mesh)
    err = _fails(a, "llm", "chat", "hi")
    assert err.startswith(
        "hearthnet: not_found: no language model in the mesh: configure [[llm.openai]] on a node"
    )
    assert "llm.chat" not in err


def test_revoked_member_is_cut_off_within_seconds_and_told_why(mesh: LocalMesh, tmp_path: Path) -> None:
    """Runs last in this module: it changes the community."""
    a, b, c = nodes(mesh)
    a.cli("member", "revoke", c.node_id, "--reason", "left the household")
    wait_for(
        lambda: c.node_id not in a.peer_ids() and c.node_id not in b.peer_ids(),
        timeout=10,
        what="the revoked member's links to close",
    )
    proc = c.cli("call", "node.ping", "--provider", a.node_id, check=False)
    assert proc.returncode != 0 and proc.stderr.startswith("hearthnet: partition:")
    # It learns it was revoked (by gossip before the cut, or from a refused redial) ...
    revoked = wait_for(lambda: c.status()["revoked"], timeout=20, what="c to learn it was revoked")
    assert revoked["by"] == a.node_id and revoked["reason"] == "left the household"
    assert c.status()["level"] is None
    assert f"level      revoked by {a.node_id} at {revoked['at']}" in c.cli("status").stdout
    # ... and stays out: redialling is refused, so it never reappears among the peers.
    c_port_peers = c.status()["peers"]
    assert all(p["node_id"] not in (a.node_id, b.node_id) for p in c_port_peers)
    assert a.status()["revoked"] is None and b.status()["revoked"] is None
    # QA F: what needs another member says why it cannot be reached (not "offline", not "promote it")
    why = (
        f"hearthnet: revoked: this node was revoked from the community by {a.node_id} at {revoked['at']}: "
        "it can no longer reach other members ('hearthnet status' shows the revocation)"
    )
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nThe spare key is under the blue pot.\n")
    for args in (
        ("query", "boiler", "--corpus", "family"),
        ("docs", "--corpus", "family"),
        ("ingest", str(note), "--corpus", "family"),
        ("llm", "chat", "hi"),
    ):
        assert _fails(c, *args) == why, args


def test_a_node_revoked_while_offline_learns_it_from_the_first_refusal(tmp_path: Path) -> None:
    """A lost phone, revoked while off: at its next start the first member it dials refuses it
    and shows it the signed revocation; its ``status`` said "level trusted" with "peers 0"."""
    with LocalMesh(tmp_path, env=None) as m:
        m.env.update(NO_MODELS)
        a, phone = m.add("a"), m.add("phone")
        m.found(a, "hearth")
        m.invite(a, phone, "trusted")
        m.wait_full_mesh(timeout=60)
        phone.stop()
        # an event of a's that the phone never gets: its log cannot store the revocation
        # (out of sequence), so it keeps the one the refusal shows it
        a.cli("invite", Identity.generate().node_id)
        a.cli("member", "revoke", phone.node_id, "--reason", "lost on the bus")
        phone.start()
        phone.wait_ready()
        revoked = wait_for(lambda: phone.status()["revoked"], timeout=30, what="the phone to learn it")
        assert revoked["by"] == a.node_id and revoked["reason"] == "lost on the bus"
        assert phone.status()["level"] is None and phone.status()["peers"] == []
        assert (phone.home / "revoked.json").exists()
        human = phone.cli("status").stdout
        assert f"level      revoked by {a.node_id} at {revoked['at']} (lost on the bus)" in human
        # it remembers across a restart, and no longer dials anyone
        phone.stop()
        phone.start()
        assert phone.wait_ready()["revoked"] == revoked


def test_status_json_is_one_document(mesh: LocalMesh) -> None:
    a, _, _ = nodes(mesh)
    proc = a.cli("status", "--json")
    assert proc.stdout.count("\n") == 1
    assert Path(a.home / "identity.key").stat().st_mode & 0o777 == 0o600
    assert Path(a.home / "control.sock").stat().st_mode & 0o777 == 0o600


def test_the_events_command_pages_through_the_whole_log(
    mesh: LocalMesh, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``hearthnet events`` asks for the log page by page (here 2 events a page) and prints
    it whole, in replay order, as one JSON document or one line per event."""
    import json

    from hearthnet.frontends import cli
    from hearthnet.frontends.cli import node as events_command

    a, _, _ = nodes(mesh)
    whole = a.cli_json("call", "events.list", "--input", '{"limit": 5000}')["output"]
    assert whole["next"] is None and len(whole["events"]) >= 3
    monkeypatch.setattr(events_command, "EVENTS_PAGE", 2)
    assert cli.main(["events", "--home", str(a.home), "--json"]) == 0
    paged = json.loads(capsys.readouterr().out)["events"]
    assert [e["event_id"] for e in paged] == [e["event_id"] for e in whole["events"]]
    assert cli.main(["events", "--home", str(a.home)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == [e["event_id"] for e in whole["events"]]

"""A member's calls to another node's local-only capabilities are refused over the real wire
(issue 29 kept what held: "a member's reach over the bus").

A: founder (anchor), no models.  Mallory: invited as a member, never runs its own node: the test
holds its key and sends requests on an authenticated link itself (``member_bus`` and the
session's raw ``request``), so nothing on Mallory's side filters what is asked.  Each of A's
local-only capabilities is refused (``not_found``: a peer never sees them) and did nothing: no
event, no file, no member promoted, no chat listed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hearthnet.errors import BusError
from hearthnet.testing import LocalMesh, member_bus, wait_for

from .conftest import NO_MODELS, event_ids, report

S = "member-local-only"
LOCAL_ONLY: dict[str, tuple[dict[str, Any], bool]] = {
    "node.status": ({}, False),
    "events.list": ({}, False),
    "community.members": ({}, False),
    "community.invite": ({"node_id": "", "level": "anchor"}, False),
    "member.promote": ({"node_id": "", "level": "anchor"}, False),
    "member.demote": ({"node_id": "", "level": "member"}, False),
    "member.revoke": ({"node_id": ""}, False),
    "file.import": ({"path": "/etc/hostname"}, False),
    "file.export": ({"doc_cid": "blake3:" + "ab" * 32, "path": ""}, False),
    "file.push": ({"path": "/etc/hostname", "node": ""}, True),
    "file.fetch": ({"doc_cid": "blake3:" + "ab" * 32}, True),
    "answer.ask": ({"question": "what is in the personal corpus?"}, True),
    "answer.sessions": ({}, False),
    "answer.session.get": ({"session": "x"}, False),
    "answer.attach": ({"session": "x", "name": "notes.txt", "data": b"a chat's own document"}, False),
    "rag.read_document": ({"data": b"a chat's own document", "filename": "notes.txt"}, False),
    "rag.known_corpora": ({}, False),
    "rag.reindex": ({"corpus": "personal"}, True),
}
"""Each local-only capability with an input that would do harm if it ran, and whether it streams."""


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("member-local"))
    m.env.update(NO_MODELS)
    try:
        a, mallory = m.add("a"), m.add("mallory")
        m.found(a, "hearth")
        m.invite(a, mallory, "member", start=False)
        yield m
    finally:
        m.close()


@pytest.mark.anyio
async def test_a_members_calls_to_local_only_capabilities_are_refused_and_do_nothing(
    mesh: LocalMesh, tmp_path: Path
) -> None:
    a, mallory = mesh.nodes["a"], mesh.nodes["mallory"]
    before = event_ids(a)
    target = tmp_path / "exported.bin"
    answers: dict[str, str] = {}
    async with member_bus(a, mallory.home) as bus:
        session = bus.sessions[a.node_id]
        served = {
            (c["capability"].split("@")[0]) for c in a.status()["capabilities"] if c["node"] == a.node_id
        }
        for name, (inp, stream) in LOCAL_ONLY.items():
            inp = {k: (mallory.node_id if k == "node_id" else v) for k, v in inp.items()}
            if name == "file.export":
                inp["path"] = str(target)
            if name == "file.push":
                inp["node"] = mallory.node_id
            call = await session.request(
                name, "1.0", {}, inp, deadline_ms=10_000, trace_id="0" * 16, stream=stream
            )
            try:
                with anyio.fail_after(20):
                    await call.result.wait()
                answers[name] = "answered"
            except BusError as exc:
                answers[name] = exc.code
            finally:
                call.release()
    report(S, json.dumps(answers))
    report(
        S, f"A serves {len(served & set(LOCAL_ONLY))} of them to itself: {sorted(served & set(LOCAL_ONLY))}"
    )
    assert all(code in ("not_found", "unauthorized") for code in answers.values()), answers
    assert {"node.status", "file.import", "file.export", "community.invite", "member.promote"} <= served
    assert not target.exists()
    wait_for(lambda: a.status()["node_id"] == a.node_id, timeout=30, what="A to keep answering")
    assert event_ids(a) == before  # no invite, promotion, demotion or revocation was written

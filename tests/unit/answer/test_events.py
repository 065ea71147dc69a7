"""Cached answers are dropped when an event says a corpus's documents changed, here or on a peer.

Real event logs and community services: the founder's node runs the composer;
a trusted member's ingest event reaches it by gossip over an authenticated link.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hearthnet.community.membership import Membership
from hearthnet.community.rules import default_rules
from hearthnet.contracts.rag import INGESTED
from hearthnet.contracts.rag_events import ingested_rule
from hearthnet.events import EventLog
from hearthnet.events.rules import EventRules
from hearthnet.identity import Identity
from hearthnet.services.community.service import CommunityService
from hearthnet.services.embedding.onnx_backend import OnnxModel
from tests.answer_harness import answer_node, linked, new_bus
from tests.polling import wait_until

QUESTION = "When is the gas boiler serviced?"
CID = "blake3:" + "ab" * 32


def rules() -> EventRules[Membership]:
    r = default_rules()
    r.register(ingested_rule())
    return r


def ingested(corpus: str) -> dict[str, object]:
    return {"corpus": corpus, "doc_cid": CID, "title": "t", "language": "en", "chunks": 1}


async def nothing() -> None:
    return None


@pytest.mark.anyio
async def test_ingest_events_here_and_from_a_peer_drop_the_answers_of_their_corpus(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    founder, member = Identity.generate(), Identity.generate()
    founder_log = EventLog(tmp_path / "f.sqlite3", rules=rules())
    founder_log.append_local(founder, "community.created", {"name": "Hearth", "founder": founder.node_id})
    founder_log.append_local(founder, "member.invited", {"node_id": member.node_id, "level": "trusted"})
    member_log = EventLog(tmp_path / "m.sqlite3", rules=rules())
    member_log.set_community(founder_log.community_id or "")
    member_log.ingest(founder_log.replay())
    member_bus = new_bus(member)
    try:
        async with answer_node(tmp_path / "node", minilm=minilm, identity=founder) as n:
            here = CommunityService(
                identity=founder,
                bus=n.bus,
                event_log=founder_log,
                addresses=list,
                on_membership_changed=nothing,
            )
            peer = CommunityService(
                identity=member,
                bus=member_bus,
                event_log=member_log,
                addresses=list,
                on_membership_changed=nothing,
            )
            for service, bus in ((here, n.bus), (peer, member_bus)):
                for registration in service.registrations():
                    bus.register(registration)
            here.on_events(n.answer.events_stored)
            await n.ingest("house", "heating_handbook.pdf")
            await n.ingest("garden", "garden_and_seeds.pdf")

            async def cached(corpus: str) -> bool:
                return (await n.ask(QUESTION, corpora=[corpus])).output["meta"]["cache"] == "hit"

            async with linked(n.bus, member_bus):
                for corpus in ("house", "garden"):
                    assert not await cached(corpus) and await cached(corpus)
                # an event appended on this node (e.g. by its own RAG service)
                await here.append(INGESTED, ingested("house"))
                assert not await cached("house") and await cached("garden")
                # a member's event, pulled by gossip
                await peer.append(INGESTED, ingested("garden"))
                # counted once the pulled batch is stored and its listeners told
                await wait_until(lambda: here.accepted_by_peer.get(member.node_id) == 1, timeout=10)
                assert not await cached("garden") and await cached("house")
                # an event of another type, or of a corpus nobody asked, changes nothing
                await here.append("member.promoted", {"node_id": member.node_id, "level": "anchor"})
                await peer.append(INGESTED, ingested("pond"))
                await wait_until(lambda: here.accepted_by_peer.get(member.node_id) == 2, timeout=10)
                assert await cached("house") and await cached("garden")
    finally:
        founder_log.close()
        member_log.close()

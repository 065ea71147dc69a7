"""The signed ``node.addresses`` record: only a member speaks, only for itself, signature checked
over the bytes received, never a wildcard, and a node's newest record wins in any arrival order."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from hearthnet.contracts.events import community_rules
from hearthnet.contracts.node_events import NODE_ADDRESSES, newest_addresses, validate_node_addresses
from hearthnet.errors import BadRequest, BusError, InvalidSignature
from hearthnet.events import EventLog
from hearthnet.events.envelope import Event
from hearthnet.identity.keys import Identity
from hearthnet.services.community.addresses import AddressKeeper

FOUNDER = Identity.from_seed(b"F" * 32)
MEMBER = Identity.from_seed(b"M" * 32)
STRANGER = Identity.from_seed(b"S" * 32)


def _log(path: Path) -> EventLog[Any]:
    log = EventLog(path, rules=community_rules())
    log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
    log.append_local(FOUNDER, "member.invited", {"node_id": MEMBER.node_id, "level": "member"})
    return log


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"addresses": []},
        {"addresses": ["0.0.0.0:7700"]},
        {"addresses": ["[::]:7700"]},
        {"addresses": ["192.168.1.20"]},  # no port
        {"addresses": ["fd00::2:7700"]},  # IPv6 without brackets
        {"addresses": [f"10.0.0.{i}:7700" for i in range(9)]},
        {"addresses": ["192.168.1.20:7700"], "name": "kitchen"},
        {"addresses": [7700]},
    ],
)
def test_a_malformed_record_is_refused(data: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        validate_node_addresses(data)


def test_a_member_records_its_addresses_and_a_stranger_cannot(tmp_path: Path) -> None:
    with _log(tmp_path / "a.db") as log:
        event = log.append_local(
            MEMBER, NODE_ADDRESSES, {"addresses": ["192.168.1.20:7700", "[fd00::2]:7700"]}
        )
        assert event.author == MEMBER.node_id
        with pytest.raises(BusError):
            log.append_local(STRANGER, NODE_ADDRESSES, {"addresses": ["192.168.1.66:7700"]})
        assert NODE_ADDRESSES in community_rules().event_types()  # every node stores and relays it


def test_a_record_is_verified_over_the_bytes_received(tmp_path: Path) -> None:
    with _log(tmp_path / "a.db") as log:
        event = log.append_local(MEMBER, NODE_ADDRESSES, {"addresses": ["192.168.1.20:7700"]})
    wire = event.to_wire()
    assert Event.from_wire(wire).data == {"addresses": ["192.168.1.20:7700"]}
    body = bytes(wire["body"]).replace(b"192.168.1.20", b"192.168.1.66")
    with pytest.raises(InvalidSignature):
        Event.from_wire({"body": body, "sig": wire["sig"]})  # someone else's address slipped in


class _Book:
    """What the keeper tells the peer manager, recorded."""

    def __init__(self) -> None:
        self.learned: list[tuple[str, list[str], bool]] = []

    def learn_addresses(self, node_id: str, addresses: list[str], *, signed: bool) -> None:
        self.learned.append((node_id, list(addresses), signed))


def test_the_newest_record_wins_whatever_the_arrival_order(tmp_path: Path) -> None:
    with _log(tmp_path / "a.db") as log:
        old = log.append_local(MEMBER, NODE_ADDRESSES, {"addresses": ["192.168.1.20:7700"]})
        new = log.append_local(MEMBER, NODE_ADDRESSES, {"addresses": ["192.168.1.21:7700"]})
        assert newest_addresses([new, old])[MEMBER.node_id][1] == ["192.168.1.21:7700"]
        assert newest_addresses([old, new])[MEMBER.node_id][1] == ["192.168.1.21:7700"]
        book = _Book()
        keeper = AddressKeeper(
            node_id=FOUNDER.node_id,
            community=cast(Any, None),  # not asked: only records arrive here
            event_log=log,
            peers=cast(Any, book),
            discovery=False,
        )
        keeper._on_events([new])
        keeper._on_events([old])  # arrives late (from another peer): ignored
        assert book.learned == [(MEMBER.node_id, ["192.168.1.21:7700"], True)]


def test_records_survive_in_the_log_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with _log(path) as log:
        log.append_local(MEMBER, NODE_ADDRESSES, {"addresses": ["192.168.1.20:7700"]})
    with EventLog(path, rules=community_rules()) as again:
        kept = newest_addresses(again.events_of_type(NODE_ADDRESSES))
    assert kept[MEMBER.node_id][1] == ["192.168.1.20:7700"]

"""When each peer was last seen, kept across a restart in ``peers.json`` (for "offline since")."""

from __future__ import annotations

import json

from hearthnet.bus.sightings import MAX_PEERS_REMEMBERED, Sighting, Sightings


def test_a_peer_is_remembered_by_name_and_the_time_its_link_went_down() -> None:
    seen = Sightings()
    seen.named("ed25519:b", "b")
    assert seen.get("ed25519:b") == Sighting("b", None)  # connected: never seen to go
    seen.went_down("ed25519:b", 1700000000.5)
    saved = json.loads(json.dumps(seen.to_json()))  # as peers.json holds it
    again = Sightings()
    again.went_down("ed25519:c", 1700000100.0)  # seen in this run: the file does not overwrite it
    again.load({**saved, "ed25519:c": {"name": "old", "last_seen": 1.0}})
    assert again.get("ed25519:b") == Sighting("b", 1700000000.5)
    assert again.get("ed25519:c") == Sighting("", 1700000100.0)


def test_a_damaged_or_oversized_file_is_read_as_far_as_it_makes_sense() -> None:
    seen = Sightings()
    seen.load(
        {
            "ed25519:x": {"name": "\x1b[31mx" * 100, "last_seen": float("nan")},
            "ed25519:y": {"name": 5, "last_seen": True},
            "ed25519:z": "not a map",
            "ed25519:w": {"last_seen": 12},
        }
    )
    x = seen.get("ed25519:x")
    assert x is not None and len(x.name) == 128 and x.last_seen is None
    assert seen.get("ed25519:y") == Sighting("", None) and seen.get("ed25519:z") is None
    assert seen.get("ed25519:w") == Sighting("", 12.0)
    seen.load(["not", "a", "map"])
    many = Sightings()
    for i in range(MAX_PEERS_REMEMBERED + 10):
        many.went_down(f"ed25519:{i}", float(i))
    assert len(many.to_json()) == MAX_PEERS_REMEMBERED and many.get("ed25519:0") is None

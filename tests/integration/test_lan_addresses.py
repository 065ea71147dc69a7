"""Addresses, discovery and renumbering on a LAN of network namespaces (``hearthnet.testing_lan``).

Every node listens on ``0.0.0.0:7700`` and finds its own dialable addresses; no test pins
``HEARTHNET_ADVERTISE_HOST``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hearthnet.testing import MeshNode, wait_for
from hearthnet.testing_lan import LanDevice, LanMesh, firewall_tool, lan_unavailable

UNAVAILABLE = lan_unavailable()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")
NO_MODELS = {"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0", "HEARTHNET_OCR": "0"}


def _peer(node: MeshNode, other: MeshNode) -> dict[str, object] | None:
    return next((p for p in node.status()["peers"] if p["node_id"] == other.node_id), None)


def _pinged(node: MeshNode, other: MeshNode) -> bool:
    proc = node.cli("call", "node.ping", "--provider", other.node_id, "--timeout", "3", check=False)
    return proc.returncode == 0


def test_a_wildcard_listen_advertises_the_lan_address_and_the_mesh_forms(tmp_path: Path) -> None:
    with LanMesh(tmp_path, env=NO_MODELS) as lan:
        a, b = lan.add("kitchen"), lan.add("laptop")
        lan.found(a)
        token = a.cli_json("invite", b.node_id)["token"]
        from hearthnet.community.invite import decode_token

        assert decode_token(token).addresses == [f"{a.address}:7700"]  # never 0.0.0.0, no loopback
        b.cli("join", token)
        b.start()
        b.wait_ready()
        lan.wait_full_mesh([a, b], timeout=60)
        assert a.status()["addresses"] == [f"{a.address}:7700"]
        # each recorded its addresses in the signed log: a's record reached b by gossip
        wait_for(
            lambda: any(
                e["event_type"] == "node.addresses" and e["author"] == a.node_id
                for e in b.cli_json("events")["events"]
            ),
            timeout=30,
            what="a's node.addresses record at b",
        )
    assert lan.leftovers() == []


def test_a_renumbered_device_is_queried_again_within_30_s(tmp_path: Path) -> None:
    with LanMesh(tmp_path, env=NO_MODELS) as lan:
        a, b, c = lan.add("kitchen"), lan.add("laptop"), lan.add("phone")
        lan.found(a)
        lan.invite(a, b)
        lan.invite(a, c)
        lan.wait_full_mesh([a, b, c], timeout=90)
        old = b.address
        new = lan.renumber(b)
        start = time.monotonic()
        for node in (a, c):
            wait_for(
                lambda node=node: (
                    (_peer(node, b) or {}).get("address") == f"{new}:7700"  # type: ignore[misc]
                    and _pinged(node, b)
                ),
                timeout=30 - (time.monotonic() - start),
                what=f"{node.name} to reach the renumbered device at {new} (was {old})",
            )
        assert time.monotonic() - start <= 30
        assert b.status()["addresses"] == [f"{new}:7700"]
    assert lan.leftovers() == []


def _files_text(home: Path) -> str:
    out = []
    for path in home.rglob("*"):
        if path.is_file() and path.suffix not in (".key",):
            out.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(out)


def test_a_node_of_another_community_learns_no_name_and_gets_no_capability(tmp_path: Path) -> None:
    with LanMesh(tmp_path, env=NO_MODELS) as lan:
        a, b = lan.add("kitchen-pi-secret"), lan.add("laptop-of-sam")
        stranger = lan.add("stranger")
        lan.found(a)
        lan.invite(a, b)
        lan.found(stranger, "elsewhere")
        lan.wait_full_mesh([a, b], timeout=60)
        # discovery works here: the members found each other on the LAN ...
        wait_for(lambda: b.node_id in a.status()["discovery"]["found"], timeout=30, what="a to find b")
        assert a.status()["discovery"]["working"]
        wait_for(lambda: stranger.status()["discovery"]["working"], timeout=30, what="stranger announcing")
        # ... and saw the stranger's announcement without taking it for a member
        status = stranger.status()
        assert status["peers"] == [] and status["discovery"]["found"] == {}
        assert all(cap["local"] for cap in status["capabilities"])
        assert stranger.node_id not in a.status()["discovery"]["found"]
        # dialling a member outright: the handshake refuses it, and says nothing of the community
        refused = stranger.cli("call", "node.ping", "--provider", a.node_id, "--timeout", "3", check=False)
        assert refused.returncode != 0
        stranger.stop()
        seen = _files_text(stranger.home)
        for secret in ("kitchen-pi-secret", "laptop-of-sam", a.node_id, b.node_id):
            assert secret not in seen
    assert lan.leftovers() == []


def _advertise(device: LanDevice, *entries: str, handshake_timeout: float = 20.0) -> None:
    config = device.home / "config.toml"
    timeout = f"[network]\nhandshake_timeout = {handshake_timeout}\n"
    text = config.read_text().replace("[network]\n", timeout, 1)
    listed = ", ".join(f'"{e}"' for e in entries)
    config.write_text(text.replace("# advertise = [", f"advertise = [{listed}]\n# advertise = [", 1))


HANDSHAKE = 60.0
"""The handshake timeout of the dropped-address test: what dialling one address at a time waits."""


def test_a_joiner_skips_a_dropped_address_and_connects_over_the_good_one(tmp_path: Path) -> None:
    if firewall_tool() is None:
        pytest.skip("needs nft or iptables for the drop rule")
    with LanMesh(tmp_path, env={**NO_MODELS, "HEARTHNET_DISCOVERY": "0"}) as lan:
        a, b = lan.add("kitchen"), lan.add("laptop")
        # the first one swallows every packet
        _advertise(a, f"{a.address}:7799", a.address, handshake_timeout=HANDSHAKE)
        _advertise(b, b.address, handshake_timeout=HANDSHAKE)
        lan.block(a, 7799)
        lan.found(a)
        lan.invite(a, b, start=False)
        start = time.monotonic()  # before b starts: its dialling starts with it
        b.start()
        b.wait_ready()
        wait_for(lambda: _peer(b, a) is not None, timeout=2 * HANDSHAKE, what="b to link to a")
        took = time.monotonic() - start
        # one at a time it would wait out the dropped address's handshake timeout first (the bound
        # is that timeout, not a speed: a busy machine may take seconds to start and link)
        assert took < HANDSHAKE, f"took {took:.1f} s"
        assert (_peer(b, a) or {}).get("address") == f"{a.address}:7700"
    assert lan.leftovers() == []


def test_join_falls_back_to_the_lan_when_the_tokens_addresses_fail(tmp_path: Path) -> None:
    with LanMesh(tmp_path, env=NO_MODELS) as lan:
        a, b = lan.add("kitchen"), lan.add("laptop")
        gone = str(list(lan.subnet.hosts())[-1])  # nobody has it: a token from before a renumber
        _advertise(a, gone)
        lan.found(a)
        token = a.cli_json("invite", b.node_id)["token"]
        b.cli("join", token)
        b.start()
        b.wait_ready()
        wait_for(lambda: _peer(b, a) is not None, timeout=60, what="b to link to a")
        # the link may be a's dial (a saw b's announcement first) or b's: either is over the LAN,
        # and b's browser hears a's announcement in its own time, so wait for that too
        assert (_peer(b, a) or {}).get("link_address", "").startswith(f"{a.address}:")  # type: ignore[union-attr]
        wait_for(
            lambda: a.node_id in b.status()["discovery"]["found"], timeout=60, what="b to find a on the LAN"
        )
    assert lan.leftovers() == []

"""LAN discovery: an announcement tells a stranger a node id and an unlinkable tag, nothing else;
a member recognises a member; a real mDNS round trip on this host finds it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import anyio
import pytest

from hearthnet.identity import Identity
from hearthnet.transport.discovery import (
    SERVICE_TYPE,
    LanDiscovery,
    announcement,
    community_tag,
    instance_label,
    member_of,
)

COMMUNITY = "hc1:q2sG0r7sQ7uSbXf0m7c3tA"
OTHER = "hc1:Zz9kL0aaaaaaaaaaaaaaaa"


def test_an_announcement_holds_a_node_id_and_a_salted_tag_only() -> None:
    node = Identity.generate().node_id
    txt = announcement(node, COMMUNITY)
    assert set(txt) == {"v", "id", "s", "t"} and txt["id"] == node
    blob = " ".join(txt.values())
    assert COMMUNITY not in blob and COMMUNITY.split(":")[1] not in blob
    again = announcement(node, COMMUNITY)
    assert again["s"] != txt["s"] and again["t"] != txt["t"]  # two announcements cannot be linked


def test_members_recognise_members_and_nobody_else() -> None:
    node = Identity.generate().node_id
    txt = announcement(node, COMMUNITY)
    assert member_of(txt, COMMUNITY) == node
    assert member_of({k.encode(): v.encode() for k, v in txt.items()}, COMMUNITY) == node  # as received
    assert member_of(txt, OTHER) is None  # another community's member learns nothing
    forged = {**txt, "id": Identity.generate().node_id}  # a tag copied onto another id
    assert member_of(forged, COMMUNITY) is None
    assert member_of({**txt, "t": community_tag(OTHER, b"x" * 16, node)}, COMMUNITY) is None
    for broken in ({}, {"v": "1"}, {**txt, "v": "2"}, {**txt, "s": "!!"}, {**txt, "id": "x" * 500}):
        assert member_of(broken, COMMUNITY) is None


@pytest.mark.anyio
async def test_a_member_is_found_over_real_mdns_and_a_stranger_is_not() -> None:
    a, b, stranger = (Identity.generate().node_id for _ in range(3))
    found: dict[str, list[str]] = {}
    stranger_found: dict[str, list[str]] = {}
    seen = anyio.Event()

    def on_found(node_id: str, addresses: list[str]) -> None:
        found[node_id] = addresses
        seen.set()

    finder = LanDiscovery(a, on_found)
    announcer = LanDiscovery(b, lambda n, x: None)
    outsider = LanDiscovery(stranger, lambda n, x: stranger_found.setdefault(n, x) and None)
    try:
        if not await announcer.announce(COMMUNITY, ["127.0.0.1:7411"]):
            pytest.skip(f"no multicast on loopback here: {announcer.error}")
        assert await finder.announce(COMMUNITY, ["127.0.0.1:7412"])
        assert await outsider.announce(OTHER, ["127.0.0.1:7413"])
        with anyio.fail_after(30):
            await seen.wait()
        assert found[b] == ["127.0.0.1:7411"]
        assert stranger not in found  # another community's node is not taken for a member
        assert a not in found  # nor is this node itself
    finally:
        for d in (finder, announcer, outsider):
            await d.close()
    assert b not in stranger_found and a not in stranger_found


@pytest.mark.anyio
async def test_a_sighting_that_does_not_resolve_is_tried_again() -> None:
    """The browser reports a name once: when resolving it fails (here: the name is not announced
    yet, as when the answer is lost on a busy LAN), the finder tries again and finds the member
    once it answers, instead of never."""
    a, b = (Identity.generate().node_id for _ in range(2))
    seen = anyio.Event()
    found: dict[str, list[str]] = {}

    def on_found(node_id: str, addresses: list[str]) -> None:
        found[node_id] = addresses
        seen.set()

    finder = LanDiscovery(a, on_found)
    announcer = LanDiscovery(b, lambda n, x: None)
    try:
        if not await finder.announce(COMMUNITY, ["127.0.0.1:7421"]):
            pytest.skip(f"no multicast on loopback here: {finder.error}")
        # the browser would report b again when it appears: stop it, so only a retry can find b
        await anyio.to_thread.run_sync(finder._browser.cancel)
        name = f"{instance_label(b)}.{SERVICE_TYPE}"
        # the sighting comes before anyone answers for it: the first resolve finds nothing
        await anyio.to_thread.run_sync(finder._resolve, finder._zc, SERVICE_TYPE, name)
        assert not seen.is_set() and name in finder._retries
        assert await announcer.announce(COMMUNITY, ["127.0.0.1:7422"])
        with anyio.fail_after(60):
            await seen.wait()
        assert found[b] == ["127.0.0.1:7422"]
        assert name not in finder._retries  # found: no more tries for it
        # a miss for another name leaves a try waiting, which closing cancels
        other = f"{instance_label(a)}-x.{SERVICE_TYPE}"
        await anyio.to_thread.run_sync(finder._resolve, finder._zc, SERVICE_TYPE, other)
        pending = finder._retries[other]
    finally:
        for d in (finder, announcer):
            await d.close()
    pending.join(timeout=30)  # cancelled: its thread ends without resolving
    assert pending.finished.is_set() and not pending.is_alive()


_CHILD = """
import sys, anyio
from hearthnet.transport.discovery import LanDiscovery
async def main():
    d = LanDiscovery("ed25519:x", lambda n, a: None)
    ok = await d.announce("hc1:abc", ["127.0.0.1:7000"])
    await d.close()
    print(ok, d.working, d.error)
anyio.run(main)
"""


def test_without_multicast_discovery_fails_soft_and_says_why() -> None:
    """A host where multicast cannot work (here: a network namespace whose only interface, lo,
    is down): announcing returns False with the reason, raises nothing, and closes cleanly."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and ip (a network namespace without multicast)")
    netns = f"hnl{os.getpid()}zc"
    subprocess.run(["ip", "netns", "add", netns], check=True, capture_output=True)
    try:
        proc = subprocess.run(
            ["ip", "netns", "exec", netns, sys.executable, "-c", _CHILD],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONWARNINGS": "error"},
        )
    finally:
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    *logged, result = proc.stdout.strip().splitlines()
    ok, working, error = result.split(" ", 2)
    assert all("[debug" in line for line in logged)  # said once, at debug level: a node at info is quiet
    assert (ok, working) == ("False", "False") and error.startswith("OSError")
    assert "Traceback" not in proc.stderr and "WARNING" not in proc.stderr.upper()

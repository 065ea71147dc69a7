"""A link cut both ways for a while, then restored: gossip converges with nothing lost or doubled.

A and B each run in their own network namespace joined by a veth pair
(10.213.0.1 <-> 10.213.0.2).  The cut is a blackhole route for the other's
address on each side: every packet between them is dropped silently (the TCP
connection is not reset; neither side is told), which is the hard case.  Both
are anchors and write events on their side of the cut; after the routes are
removed both logs must hold exactly the union, once each, in the same order.
Needs root and ``ip netns`` (skipped otherwise).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from hearthnet.identity import Identity
from hearthnet.testing import LocalMesh, MeshNode, wait_for

from .conftest import NO_MODELS, event_ids, log_records, report

S = "partition"
ADDR = {"a": "10.213.0.1", "b": "10.213.0.2"}


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


def _netns_available() -> bool:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"hnprobe{os.getpid()}"
    ok = _ip("netns", "add", probe, check=False).returncode == 0
    if ok:
        _ip("netns", "del", probe, check=False)
    return ok


pytestmark = pytest.mark.skipif(not _netns_available(), reason="needs root and ip netns")


@pytest.fixture(scope="module")
def namespaces() -> Iterator[dict[str, str]]:
    tag = f"{os.getpid() % 100000}"
    ns = {"a": f"hnfa{tag}", "b": f"hnfb{tag}"}
    veth = {"a": f"hnva{tag}", "b": f"hnvb{tag}"}
    try:
        for side in ("a", "b"):
            _ip("netns", "add", ns[side])
        _ip("link", "add", veth["a"], "type", "veth", "peer", "name", veth["b"])
        for side in ("a", "b"):
            _ip("link", "set", veth[side], "netns", ns[side])
            _ip("-n", ns[side], "addr", "add", f"{ADDR[side]}/24", "dev", veth[side])
            _ip("-n", ns[side], "link", "set", veth[side], "up")
            _ip("-n", ns[side], "link", "set", "lo", "up")
        yield ns
    finally:
        for side in ("a", "b"):
            _ip("netns", "del", ns[side], check=False)  # takes its veth end with it


def _start_in(node: MeshNode, netns: str) -> None:
    """``MeshNode.start`` inside ``netns`` (the control socket is a file: the CLI still reaches it)."""
    node.log_path = node.home / "node.log"
    with open(node.log_path, "ab") as log:
        node.process = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                netns,
                sys.executable,
                "-m",
                "hearthnet.frontends.cli",
                "--home",
                str(node.home),
                "node",
                "run",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**node.env, **node.extra_env},
            start_new_session=True,
        )


def _cut(ns: dict[str, str], on: bool) -> None:
    verb = "add" if on else "del"
    _ip("-n", ns["a"], "route", verb, "blackhole", f"{ADDR['b']}/32")
    _ip("-n", ns["b"], "route", verb, "blackhole", f"{ADDR['a']}/32")


def _linked_pair(
    mesh: LocalMesh, namespaces: dict[str, str], env: dict[str, str]
) -> tuple[MeshNode, MeshNode]:
    """A (founder) and B (anchor), each in its namespace, linked to each other."""
    a = mesh.add("a", env={"HEARTHNET_LISTEN": f"{ADDR['a']}:0", **env})
    b = mesh.add("b", env={"HEARTHNET_LISTEN": f"{ADDR['b']}:0", **env})
    a.cli_json("community", "create", "split")
    _start_in(a, namespaces["a"])
    a.wait_ready()
    token = a.cli_json("invite", b.node_id, "--level", "anchor")["token"]
    b.cli("join", token)
    _start_in(b, namespaces["b"])
    b.wait_ready()
    mesh.wait_full_mesh([a, b], timeout=60)
    return a, b


def test_gossip_converges_after_a_two_way_cut(
    tmp_path_factory: pytest.TempPathFactory, namespaces: dict[str, str]
) -> None:
    mesh = LocalMesh(tmp_path_factory.mktemp("partition"))
    mesh.env.update(NO_MODELS)
    try:
        # A link given 30 s of silence: early in the cut it still looks up, so the pulls fail.
        slow_liveness = {"HEARTHNET_KEEPALIVE_SECONDS": "10", "HEARTHNET_DEAD_AFTER_SECONDS": "30"}
        a, b = _linked_pair(mesh, namespaces, slow_liveness)
        wait_for(lambda: event_ids(a) == event_ids(b), timeout=30, what="A and B to agree before the cut")
        before = event_ids(a)
        report(
            S,
            f"A {a.status()['addresses']} and B {b.status()['addresses']} linked in two namespaces; "
            f"{len(before)} events each",
        )

        _cut(namespaces, True)
        failures_before = len(log_records(a, "gossip_pull_failed"))
        written_a = [a.cli_json("invite", Identity.generate().node_id)["event_id"] for _ in range(3)]
        invited_b = [Identity.generate().node_id for _ in range(3)]
        written_b = [b.cli_json("invite", n)["event_id"] for n in invited_b]
        b_promotes = b.cli_json("member", "promote", invited_b[0], "--level", "trusted")
        written_b.append(b_promotes["event_id"])
        report(
            S, f"cut both ways (blackhole routes); wrote {len(written_a)} events on A, {len(written_b)} on B"
        )
        # Prove the cut bites: A's periodic pull from B fails, and A still lacks all of B's new events.
        wait_for(
            lambda: len(log_records(a, "gossip_pull_failed")) > failures_before,
            timeout=45,
            what="A's gossip pull from B to fail during the cut",
        )
        during_a, during_b = set(event_ids(a)), set(event_ids(b))
        failure = log_records(a, "gossip_pull_failed")[-1]
        report(
            S,
            f"during the cut: A's pull from B failed ({failure.get('code')}); A holds {len(during_a)}, "
            f"B holds {len(during_b)}; A has none of B's new events: {not (during_a & set(written_b))}",
        )
        assert not during_a & set(written_b)
        assert not during_b & set(written_a)

        _cut(namespaces, False)
        expected = set(before) | set(written_a) | set(written_b)
        wait_for(
            lambda: set(event_ids(a)) == expected and set(event_ids(b)) == expected,
            timeout=90,
            what="both logs to hold the union after the cut heals",
        )
        final_a, final_b = event_ids(a), event_ids(b)
        report(
            S,
            f"restored: A and B each hold {len(final_a)} events (expected {len(expected)}), "
            f"duplicates {len(final_a) - len(set(final_a))}, same replay order {final_a == final_b}",
        )
        assert len(final_a) == len(set(final_a)) == len(expected)
        assert final_a == final_b
        assert a.cli_json("call", "node.ping", "--provider", b.node_id)["output"]["pong"] is True
    finally:
        mesh.close()


def test_a_silent_peer_is_dropped_during_the_cut_and_relinked_after(
    tmp_path_factory: pytest.TempPathFactory, namespaces: dict[str, str]
) -> None:
    """Keepalives find the blackholed peer (no FIN, no RST) on both sides; the peer manager relinks."""
    mesh = LocalMesh(tmp_path_factory.mktemp("silent"))
    mesh.env.update(NO_MODELS)
    liveness = {"HEARTHNET_KEEPALIVE_SECONDS": "1", "HEARTHNET_DEAD_AFTER_SECONDS": "3"}
    try:
        a, b = _linked_pair(mesh, namespaces, liveness)
        assert [p for p in a.status()["capabilities"] if p.get("node") == b.node_id]
        _cut(namespaces, True)
        wait_for(
            lambda: b.node_id not in a.peer_ids() and a.node_id not in b.peer_ids(),
            timeout=30,
            what="both sides to drop the silent link (dead after 3 s)",
        )
        silent = [r for n in (a, b) for r in log_records(n, "link_silent")]
        report(S, f"cut: both sides dropped the link; link_silent records: {len(silent)}")
        assert len(silent) >= 2
        assert not [p for p in a.status()["capabilities"] if p.get("node") == b.node_id]
        _cut(namespaces, False)
        wait_for(
            lambda: b.node_id in a.peer_ids() and a.node_id in b.peer_ids(),
            timeout=60,
            what="A and B to link again after the cut heals",
        )
        assert a.cli_json("call", "node.ping", "--provider", b.node_id)["output"]["pong"] is True
        report(S, "healed: A and B linked again and B answers A's ping")
    finally:
        mesh.close()

"""The namespace LAN of ``hearthnet.testing_lan`` does what its tests rely on.

Devices reach each other only over the bridge (never through 127.0.0.1), a pulled
cable, a renumbering and a drop rule each bite, and every namespace, link and
bridge is gone afterwards, also when the body failed or the run was killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hearthnet.testing_lan import PREFIX, LanMesh, firewall_tool, lan_unavailable, remove_stale

UNAVAILABLE = lan_unavailable()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")
NO_MODELS = {"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"}
PORT = 7710


def _listen(lan: LanMesh, name: str) -> tuple[subprocess.Popen[bytes], str]:
    """A TCP server on [::]:PORT (IPv4 too) inside a new device; waits until it listens."""
    device = lan.device(name)
    server = subprocess.Popen(
        [
            *device.command()[:4],
            sys.executable,
            "-c",
            "import socket\ns=socket.socket(socket.AF_INET6)\n"
            "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            "s.setsockopt(socket.IPPROTO_IPV6,socket.IPV6_V6ONLY,0)\n"
            f"s.bind(('::',{PORT}));s.listen();print('up',flush=True)\n"
            "while True:\n c,_=s.accept();c.close()",
        ],
        stdout=subprocess.PIPE,
    )
    assert server.stdout is not None and server.stdout.readline().strip() == b"up"
    return server, device.address


def test_devices_reach_each_other_over_the_bridge_only(tmp_path: Path) -> None:
    with LanMesh(tmp_path, ipv6=True) as lan:
        server, address = _listen(lan, "server")
        try:
            client = lan.device("client")
            assert lan.connects(client, address, PORT)
            address6 = lan.devices["server"].address6
            assert address6 is not None and lan.connects(client, address6, PORT)
            # No shortcut: the server's port is not on the client's own loopback.
            assert not lan.connects(client, "127.0.0.1", PORT, timeout=1)
            assert client.run("ip", "-4", "-o", "addr", "show", "eth0").stdout.count("inet ") == 1

            lan.link_down(lan.devices["server"])
            assert not lan.connects(client, address, PORT, timeout=1)
            lan.link_up(lan.devices["server"])
            assert lan.connects(client, address, PORT, timeout=10)

            new = lan.renumber(lan.devices["server"])
            assert new != address
            assert not lan.connects(client, address, PORT, timeout=1)
            assert lan.connects(client, new, PORT, timeout=10)

            if firewall_tool() is not None:
                lan.block(lan.devices["server"], PORT)
                assert not lan.connects(client, new, PORT, timeout=1)
                lan.unblock(lan.devices["server"])
                assert lan.connects(client, new, PORT, timeout=10)
        finally:
            server.kill()
            server.communicate()  # reaps it and closes its pipe
    assert lan.leftovers() == []


def test_everything_is_removed_after_a_failure(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="the body failed"), LanMesh(tmp_path) as lan:
        lan.device("a")
        lan.device("b")
        assert len(lan.leftovers()) == 5  # two namespaces, two bridge ports, the bridge
        raise RuntimeError("the body failed")
    assert lan.leftovers() == []


def test_a_killed_runs_leftovers_are_removed_by_the_next_run(tmp_path: Path) -> None:
    script = (
        "import os,sys\nfrom pathlib import Path\nfrom hearthnet.testing_lan import LanMesh\n"
        "lan=LanMesh(Path(sys.argv[1]))\nlan.device('a')\nprint(os.getpid(),flush=True)\nos._exit(0)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=60, check=True
    )
    dead = proc.stdout.strip()
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{PREFIX}{dead}b" in links and f"{PREFIX}{dead}-" in spaces  # really left behind
    removed = remove_stale()
    assert any(name.startswith(f"{PREFIX}{dead}-") for name in removed)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{PREFIX}{dead}" not in links and f"{PREFIX}{dead}" not in spaces
    assert str(os.getpid()) != dead


def test_nodes_in_namespaces_form_a_community_over_the_lan(tmp_path: Path) -> None:
    with LanMesh(tmp_path, env=NO_MODELS) as lan:
        a = lan.add("a", advertise_own_address=True)
        b = lan.add("b", advertise_own_address=True)
        lan.found(a)
        lan.invite(a, b)
        lan.wait_full_mesh([a, b], timeout=60)
        peer = next(p for p in a.status()["peers"] if p["node_id"] == b.node_id)
        assert peer["address"] == f"{b.address}:7700"
        assert peer["link_address"].partition(":")[0] == b.address  # over the bridge, not loopback
        assert a.status()["addresses"] == [f"{a.address}:7700"]
    assert lan.leftovers() == []

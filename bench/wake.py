"""Sleep and wake on a LAN of network namespaces (``hearthnet.testing_lan``): how long after a
device's cable is pulled its peer shows it offline, and how long after it is plugged back in
the two are linked again.

Two devices, each a ``hearthnet node run`` in its own namespace on one bridge, listening on
``0.0.0.0:7700``.  Each round pulls the sleeper's cable (its bridge port goes down: no FIN),
waits for the other's ``node.status`` (asked through its control socket every 50 ms) to list
it offline, then plugs it back in and waits for the status to list it as a peer again.

Floors, same round: *offline* against ``dead_after_seconds``, the silence a link is given
before it is closed (counted from the last frame heard, which came up to a keepalive period
before the cable was pulled: a round can beat it by that much); *relink* against the network's own return, a
prober inside the watcher's namespace that dials the sleeper's port every 20 ms from the
moment the cable is back (ARP, the bridge port, one TCP handshake).  Targets (issue 30):
offline within 15 s, relinked within 10 s.

    python -m bench.wake [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from bench.common import Metric, median_range
from hearthnet.testing_lan import LanDevice, LanMesh, lan_unavailable

ISSUE = "30"
NO_MODELS = {"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0", "HEARTHNET_UI": "0"}
PROBER = r"""
import socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
while True:
    try:
        socket.create_connection((host, port), timeout=0.2).close()
        break
    except OSError:
        time.sleep(0.02)
print(time.monotonic(), flush=True)
"""


async def _poll_status(watcher: LanDevice, done: Callable[[dict[str, object]], bool], limit: float) -> float:
    """``time.monotonic()`` when ``done(status)`` first holds (status asked every 50 ms)."""
    from hearthnet.frontends.client.client import AsyncClient

    with anyio.fail_after(limit):
        async with AsyncClient(watcher.home) as client:
            while True:
                status = (await client.call("node.status", timeout=10)).output
                if done(status):
                    return time.monotonic()
                await anyio.sleep(0.05)


def _round(lan: LanMesh, watcher: LanDevice, sleeper: LanDevice) -> tuple[float, float, float]:
    """(offline after, relinked after, network back after) in seconds, one sleep and wake."""

    def linked(status: dict[str, object]) -> bool:
        return sleeper.node_id in {p["node_id"] for p in status["peers"]}  # type: ignore[attr-defined]

    prober = subprocess.Popen(
        ["ip", "netns", "exec", watcher.netns, sys.executable, "-c", PROBER, sleeper.address, "7700"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert prober.stdin is not None and prober.stdout is not None
        assert prober.stdout.readline().strip() == "ready"
        lan.link_down(sleeper)
        slept = time.monotonic()
        offline_at = anyio.run(_poll_status, watcher, lambda s: not linked(s), 120.0)
        lan.link_up(sleeper)
        woke = time.monotonic()
        prober.stdin.write("go\n")
        prober.stdin.flush()
        relinked_at = anyio.run(_poll_status, watcher, linked, 120.0)
        network_at = float(prober.stdout.readline())
    finally:
        prober.kill()
        prober.wait()
    return offline_at - slept, relinked_at - woke, max(network_at - woke, 0.001)


def measure(quick: bool) -> dict[str, list[float]]:
    reason = lan_unavailable()
    if reason is not None:
        raise RuntimeError(f"no namespace LAN here: {reason}")
    rounds = 1 if quick else 3
    out: dict[str, list[float]] = {"offline": [], "relink": [], "network": [], "dead_after": []}
    with tempfile.TemporaryDirectory() as tmp, LanMesh(Path(tmp), env=NO_MODELS) as lan:
        probe = lan.device("probe")
        pin = "--advertise" not in probe.cli("init", "--help").stdout
        watcher = lan.add("watcher", advertise_own_address=pin)
        sleeper = lan.add("sleeper", advertise_own_address=pin)
        lan.found(watcher)
        lan.invite(watcher, sleeper)
        lan.wait_full_mesh([watcher, sleeper], timeout=120)
        from hearthnet.config import load_config

        dead_after = load_config(watcher.home, env={}).network.dead_after_seconds
        for _ in range(rounds):
            offline, relink, network = _round(lan, watcher, sleeper)
            out["offline"].append(offline)
            out["relink"].append(relink)
            out["network"].append(network)
            out["dead_after"].append(dead_after)
    return out


def run(quick: bool) -> list[Metric]:
    got = measure(quick)
    off, off_lo, off_hi = median_range(got["offline"])
    rel, rel_lo, rel_hi = median_range(got["relink"])
    dead_after = got["dead_after"][0]
    network = statistics.median(got["network"])
    return [
        Metric(
            ISSUE,
            "lan: a peer asleep (cable pulled, no FIN) shown offline",
            "s",
            round(off, 2),
            dead_after,
            round(off / dead_after, 2),
            "<= 15 s",
            off <= 15.0,
            round(off_lo, 2),
            round(off_hi, 2),
            note=f"floor: dead_after_seconds (silence from the last frame); {len(got['offline'])} round(s)",
        ),
        Metric(
            ISSUE,
            "lan: relinked after wake (cable back)",
            "s",
            round(rel, 2),
            round(network, 3),
            round(rel / network, 1),
            "<= 10 s",
            rel <= 10.0,
            round(rel_lo, 2),
            round(rel_hi, 2),
            note="floor: the network back (a TCP connect to the sleeper's port succeeds)",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps([m.to_json() for m in run(args.quick)], indent=2))


if __name__ == "__main__":
    main()

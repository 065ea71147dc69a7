"""The benchmark report: rows against peers go to the peers table, rows against floors to the other."""

from __future__ import annotations

import pytest

from bench.common import Metric, PeerMetric
from bench.report import markdown_table, peers_table


def _peer(ours: float | None, peer: float | None, target: str, passed: bool | None) -> PeerMetric:
    return PeerMetric("bus", "bus echo calls/s", "calls/s", ours, peer, "NATS", target, passed, note="n")


def test_peer_ratio_is_ours_over_peer_and_absent_without_a_peer_or_a_figure() -> None:
    assert _peer(8_000, 16_000, "(reported)", None).ratio == pytest.approx(0.5, abs=1e-3)
    assert _peer(8_000, None, "(reported)", None).ratio is None
    assert _peer(None, 16_000, "(reported)", None).ratio is None


def test_each_row_lands_in_its_own_table() -> None:
    floor = Metric("node", "bus p50", "ms", 0.4, 0.1, 4.0, "<= 2x floor", False).to_json()
    peer = _peer(8_000, 16_000, ">= 1.0x NATS", False).to_json()
    peers = peers_table([floor, peer])
    floors = markdown_table([floor, peer])
    assert "bus echo calls/s" in peers and "bus p50" not in peers
    assert "bus p50" in floors and "bus echo calls/s" not in floors


def test_a_missed_peer_target_says_by_how_much() -> None:
    row = peers_table([_peer(8_000, 16_000, ">= 1.0x NATS", False).to_json()]).splitlines()[-1]
    assert "16,000 calls/s (NATS)" in row
    assert "0.50x" in row
    assert "**FAIL**, misses by 50% (0.50x vs 1x)" in row


def test_an_absolute_target_without_a_peer() -> None:
    m = PeerMetric("load", "load: p99", "ms", 2_500.0, None, "", "<= 2000 ms", False).to_json()
    row = peers_table([m]).splitlines()[-1]
    assert "| 2,500 ms | - | - | <= 2000 ms |" in row
    assert "misses by 500 ms" in row


def test_not_measured_and_failed_to_run_rows_say_so() -> None:
    unmeasured = PeerMetric(
        "answer", "answer.ask ttft", "ms", None, None, "prompt", "(reported)", None, note="not measured: why"
    ).to_json()
    failed = {"issue": "peers_bus", "name": "bench.peers_bus", "failed": True, "note": "boom", "kind": "peer"}
    rows = peers_table([unmeasured, failed]).splitlines()
    assert "not measured: why" in rows[2] and rows[2].endswith("| not measured |")
    assert "bench.peers_bus: **failed to run**" in rows[3] and "FAIL: boom" in rows[3]
    assert "peers_bus" not in markdown_table([failed])

"""The HTTP server's connection caps (``frontends/http/connections.py``): pure counting."""

from __future__ import annotations

import pytest

from hearthnet.config import UiConfig
from hearthnet.errors import BadRequest
from hearthnet.frontends.http.connections import ConnectionLimits, ConnectionTally, connection_limits


def test_caps_are_at_most_half_the_descriptor_limit() -> None:
    assert connection_limits(UiConfig(), 1 << 20).max_connections == 1024
    small = connection_limits(UiConfig(), 1024)
    assert (small.max_connections, small.max_per_client) == (512, 128)
    tiny = connection_limits(UiConfig(max_connections_per_client=128), 100)
    assert tiny.max_connections == 50 and tiny.max_per_client == 50


def test_a_client_past_its_cap_and_anyone_past_the_total_are_refused() -> None:
    tally = ConnectionTally(ConnectionLimits(4, 2, header_seconds=1.0, body_seconds=1.0))
    assert [tally.admit("10.0.0.1") for _ in range(3)] == [None, None, "per_client"]
    assert [tally.admit("10.0.0.2") for _ in range(3)] == [None, None, "total"]
    assert tally.admit("10.0.0.3") == "total"
    tally.release("10.0.0.1")
    assert tally.admit("10.0.0.3") is None and tally.total == 4
    for client in ("10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.3"):
        tally.release(client)
    assert tally.total == 0 and not tally.by_client


@pytest.mark.parametrize(
    "kw",
    [
        {"max_connections": 0},
        {"max_connections_per_client": 2000},
        {"header_timeout_seconds": 0.0},
        {"body_timeout_seconds": 7200.0},
    ],
)
def test_bad_settings_are_refused(kw: dict[str, float]) -> None:
    with pytest.raises(BadRequest):
        UiConfig(**kw)  # type: ignore[arg-type]

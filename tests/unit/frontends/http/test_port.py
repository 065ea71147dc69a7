"""Which port the web UI listens on: the default moves to the next free one, a named one never."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from hearthnet.errors import BadRequest
from hearthnet.frontends.http.server import bind_ui_socket


@pytest.fixture
def taken() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


def test_a_taken_default_port_moves_to_the_next_free_one(taken: int) -> None:
    sock = bind_ui_socket("127.0.0.1", taken, explicit=False, last=None)
    try:
        assert taken < sock.getsockname()[1] <= taken + 64
    finally:
        sock.close()


def test_the_port_used_last_comes_first(taken: int) -> None:
    first = bind_ui_socket("127.0.0.1", 0, explicit=True, last=None)
    last = first.getsockname()[1]
    first.close()
    again = bind_ui_socket("127.0.0.1", taken, explicit=False, last=last)
    try:
        assert again.getsockname()[1] == last
    finally:
        again.close()


def test_a_taken_port_named_in_the_config_is_an_error_naming_it(taken: int) -> None:
    with pytest.raises(BadRequest, match=f"127.0.0.1:{taken}: the port is taken"):
        bind_ui_socket("127.0.0.1", taken, explicit=True, last=None)

"""``hearthnet status`` and ``node run`` text: where peers listen, aligned capability columns, and
the one sentence a taken listen address gets."""

from __future__ import annotations

import errno
from pathlib import Path

from hearthnet.config import load_config
from hearthnet.frontends.cli.node import capability_table
from hearthnet.node import _listen_error, listen_address


def test_an_inbound_peer_is_shown_at_the_address_it_listens_on() -> None:
    assert listen_address("127.0.0.1:34218", ["127.0.0.1:7700"]) == "127.0.0.1:7700"
    assert listen_address("10.0.0.5:41000", ["192.168.1.2:7700", "10.0.0.5:7700"]) == "10.0.0.5:7700"
    assert listen_address("[::1]:41000", ["[::1]:7700"]) == "[::1]:7700"
    assert listen_address("127.0.0.1:7700", ["127.0.0.1:7700"]) == "127.0.0.1:7700"  # we dialled it
    assert listen_address("127.0.0.1:34218", []) == "127.0.0.1:34218"  # nothing advertised
    assert listen_address("10.0.0.5:41000", ["192.168.1.2:7700"]) == "192.168.1.2:7700"


def test_capability_columns_line_up_however_long_a_name_is() -> None:
    caps = [
        {"capability": "node.ping@1.0", "params": {}, "node": "n", "local": True},
        {"capability": "answer.session.rename@1.0", "params": {"corpus": "family"}, "node": "ed25519:x"},
        {"capability": "rag.query@1.0", "params": {"corpus": "a-very-long-corpus-name-indeed"}, "node": "n2"},
    ]
    lines = capability_table(caps).splitlines()
    params_at = {line.index("{") for line in lines}
    where_at = {len(line) - len(line.split()[-1]) for line in lines}
    assert len(params_at) == 1 and len(where_at) == 1, lines
    assert lines[0].endswith("local")
    assert capability_table([]) == "  -"


def test_a_taken_listen_address_is_one_clean_sentence(tmp_path: Path) -> None:
    """QA row 18: "address already in use; (another program or node holds it: stop that, or) choose …"."""
    config = load_config(tmp_path, env={"HEARTHNET_LISTEN": "127.0.0.1:7700"})
    taken = _listen_error(config, OSError(errno.EADDRINUSE, "Address already in use")).message
    assert taken == (
        "cannot listen on 127.0.0.1:7700: address already in use by another program or node: stop it, "
        f"or choose another address with [network] listen in {tmp_path / 'config.toml'} or "
        "HEARTHNET_LISTEN (a new home takes 'hearthnet init --listen HOST:PORT')"
    )
    other = _listen_error(config, OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")).message
    assert other.startswith(
        "cannot listen on 127.0.0.1:7700: cannot assign requested address: choose another address with "
    )
    assert "(" not in taken.split(" (a new home")[0] and ";" not in taken

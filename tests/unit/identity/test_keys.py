"""Identities: node id format, key file permissions, refusal to overwrite, signatures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hearthnet.errors import BadRequest, InvalidSignature
from hearthnet.identity import (
    Identity,
    create_identity,
    load_identity,
    node_id_from_public_key,
    public_key_from_node_id,
    verify_signature,
)


def test_key_file_is_0600_and_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "identity.key"
    identity = create_identity(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_identity(path).node_id == identity.node_id
    with pytest.raises(BadRequest, match="refusing to overwrite"):
        create_identity(path)
    assert load_identity(path).node_id == identity.node_id


@pytest.mark.parametrize("dies_before", ["fsync", "link"])
def test_a_process_killed_while_writing_its_key_leaves_no_key_file(tmp_path: Path, dies_before: str) -> None:
    """Killed mid-write (here: at the fsync or the link), the home has no key file, so init works again."""
    import subprocess
    import sys

    path = tmp_path / "identity.key"
    script = (
        "import os, sys\n"
        f"setattr(os, {dies_before!r}, lambda *a: os._exit(9))\n"
        "from pathlib import Path\n"
        "from hearthnet.identity import create_identity\n"
        "create_identity(Path(sys.argv[1]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(path)], check=False)
    assert proc.returncode == 9
    assert not path.exists()
    identity = create_identity(path)  # a leftover temporary file does not get in the way
    assert load_identity(path).node_id == identity.node_id
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == ["identity.key"]


def test_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "identity.key"
    create_identity(path)
    os.chmod(path, 0o644)
    with pytest.raises(BadRequest, match="chmod 600"):
        load_identity(path)


def test_node_id_format_round_trips() -> None:
    identity = Identity.generate()
    assert identity.node_id.startswith("ed25519:") and "=" not in identity.node_id
    assert public_key_from_node_id(identity.node_id) == identity.public_key
    assert node_id_from_public_key(identity.public_key) == identity.node_id


@given(st.text(max_size=80))
def test_garbage_node_ids_raise_bad_request(text: str) -> None:
    try:
        public_key_from_node_id(text)
    except BadRequest:
        return
    assert node_id_from_public_key(public_key_from_node_id(text)) == text


@given(st.binary(max_size=256), st.integers(min_value=0, max_value=63), st.integers(min_value=0, max_value=7))
def test_any_flipped_signature_bit_fails(message: bytes, byte: int, bit: int) -> None:
    identity = Identity.generate()
    sig = bytearray(identity.sign(message))
    verify_signature(identity.node_id, message, bytes(sig))
    sig[byte] ^= 1 << bit
    with pytest.raises(InvalidSignature):
        verify_signature(identity.node_id, message, bytes(sig))


def test_repr_does_not_leak_key_material() -> None:
    identity = Identity.generate()
    assert bytes(identity.signing_key).hex() not in repr(identity)

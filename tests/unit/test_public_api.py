"""The public names of each package are a contract: changing them must be deliberate (httpx does the same)."""

from __future__ import annotations

import importlib

import pytest

EXPECTED = {
    "hearthnet.client": {
        "AsyncClient",
        "BusError",
        "CallResult",
        "Client",
        "CorpusAnswer",
        "CorpusHit",
        "MultiSearch",
        "resolve_home",
        "search_corpora",
    },
    "hearthnet.identity": {
        "NODE_ID_PREFIX",
        "Identity",
        "create_identity",
        "load_identity",
        "node_id_from_public_key",
        "public_key_from_node_id",
        "verify_signature",
    },
    "hearthnet.wire": {
        "DEFAULT_MAX_FRAME",
        "FrameDecoder",
        "MsgLimits",
        "encode_frame",
        "pack",
        "unpack_map",
    },
}


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_exported_names(module: str) -> None:
    mod = importlib.import_module(module)
    assert set(mod.__all__) == EXPECTED[module]
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.{name} is exported but missing"


def test_every_error_code_has_one_exported_class() -> None:
    errors = importlib.import_module("hearthnet.errors")
    classes = [getattr(errors, n) for n in errors.__all__ if isinstance(getattr(errors, n), type)]
    codes = {c.code for c in classes if c.__name__ not in ("BusError", "ProtocolError")}
    assert codes == set(errors.ERROR_CODES)

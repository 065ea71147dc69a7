"""``rag.query``'s ``mode``: one of three, ``hybrid`` unless asked, anything else a clear
``bad_request``."""

from __future__ import annotations

from typing import Any

import pytest

from hearthnet.contracts.rag import DEFAULT_MODE, QUERY_MODES
from hearthnet.errors import BadRequest
from hearthnet.services.rag.inputs import query_input, query_mode


@pytest.mark.parametrize("mode", QUERY_MODES)
def test_each_mode_is_accepted(mode: str) -> None:
    inp = {"query": "boiler", "mode": mode}
    assert query_input(inp) == ("boiler", 5, None, True)
    assert query_mode(inp) == mode


def test_the_default_is_hybrid() -> None:
    assert DEFAULT_MODE == "hybrid"
    assert query_mode({"query": "x"}) == query_mode({"query": "x", "mode": None}) == "hybrid"


@pytest.mark.parametrize("bad", ["sparse", "", "HYBRID", 3, True, ["dense"], {"m": 1}, "x" * 10_000])
def test_another_mode_is_bad_request_naming_the_three(bad: Any) -> None:
    with pytest.raises(BadRequest, match="dense, keyword, hybrid") as err:
        query_input({"query": "x", "mode": bad})
    assert len(err.value.message) <= 200

"""``rag.query``'s ``mode``: one of three, ``hybrid`` unless asked, anything else a clear
``bad_request``; its ``embedding`` (a vector instead of words); ``rag.get``'s input."""

from __future__ import annotations

from typing import Any

import pytest

from hearthnet.contracts.rag import DEFAULT_MODE, QUERY_MODES
from hearthnet.errors import BadRequest
from hearthnet.services.rag.inputs import get_input, query_input, query_mode, update_input


@pytest.mark.parametrize("mode", QUERY_MODES)
def test_each_mode_is_accepted(mode: str) -> None:
    inp = {"query": "boiler", "mode": mode}
    q = query_input(inp)
    assert (q.query, q.k, q.where, q.include_text, q.embedding, q.mode) == (
        "boiler",
        5,
        None,
        True,
        None,
        mode,
    )
    assert query_mode(inp) == mode


def test_the_default_is_hybrid() -> None:
    assert DEFAULT_MODE == "hybrid"
    assert query_mode({"query": "x"}) == query_mode({"query": "x", "mode": None}) == "hybrid"


@pytest.mark.parametrize("bad", ["sparse", "", "HYBRID", 3, True, ["dense"], {"m": 1}, "x" * 10_000])
def test_another_mode_is_bad_request_naming_the_three(bad: Any) -> None:
    with pytest.raises(BadRequest, match="dense, keyword, hybrid") as err:
        query_input({"query": "x", "mode": bad})
    assert len(err.value.message) <= 200


def test_a_vector_alone_answers_dense_and_words_stay_optional() -> None:
    q = query_input({"embedding": [0.5, 1, -2.0], "k": 3})
    assert q.embedding == [0.5, 1.0, -2.0] and q.query is None and q.mode == "dense" and q.text == ""
    both = query_input({"embedding": [1.0], "query": "boiler", "mode": "hybrid"})
    assert both.mode == "hybrid" and both.text == "boiler"


@pytest.mark.parametrize(
    "inp, match",
    [
        ({}, "input.query"),
        ({"embedding": []}, "1..8192 numbers"),
        ({"embedding": [1.0, float("nan")]}, "finite"),
        ({"embedding": [True]}, "finite"),
        ({"embedding": ["1"]}, "finite"),
        ({"embedding": "1,2"}, "list"),
        ({"embedding": [0.0] * 8193}, "1..8192"),
        ({"embedding": [1.0], "mode": "keyword"}, "needs input.query"),
    ],
)
def test_a_bad_vector_is_bad_request(inp: dict[str, Any], match: str) -> None:
    with pytest.raises(BadRequest, match=match):
        query_input(inp)


def test_get_input_defaults_and_limits() -> None:
    got = get_input({})
    assert (got.ids, got.where, got.contains, got.limit, got.offset) == (None, None, None, 100, 0)
    assert got.include_text and not got.include_embeddings
    got = get_input({"ids": ["a"], "filter": {"page": 2}, "contains": "boil", "limit": 1000, "offset": 5})
    assert got.ids == ["a"] and got.where == {"page": {"$eq": 2}} and got.contains == "boil"
    for bad, match in (
        ({"limit": 1001}, "limit"),
        ({"limit": 0}, "limit"),
        ({"offset": -1}, "offset"),
        ({"ids": ["x"] * 1001}, "ids"),
        ({"ids": [""]}, "ids"),
        ({"contains": "x" * 257}, "contains"),
        ({"include_embeddings": 1}, "include_embeddings"),
        ({"where": {}}, "unknown"),
    ):
        with pytest.raises(BadRequest, match=match):
            get_input(bad)


CID = "blake3:" + "ab" * 32


def test_an_update_may_give_a_file_name_alone_as_the_last_part_of_a_path() -> None:
    assert update_input({"doc_cid": CID, "filename": "boiler.pdf"}).filename == "boiler.pdf"
    assert update_input({"doc_cid": CID, "filename": "C:\\Docs\\boiler.pdf"}).filename == "boiler.pdf"
    assert update_input({"doc_cid": CID, "title": "T"}).filename is None
    for bad, said in (
        ({"filename": 3}, "must be a string"),
        ({"filename": "/"}, "must name a file"),
        ({"filename": "x" * 300}, "at most 255"),
        ({}, "must change something"),
    ):
        with pytest.raises(BadRequest, match=said):
            update_input({"doc_cid": CID, **bad})

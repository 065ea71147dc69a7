"""``search_archives``: the seeds' text byte for byte, JSON, ``rag_config`` replace semantics, top_k."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.config.archives import ArchiveDefaults, archive_defaults
from hearthnet.errors import BadRequest, NotFound, Partition
from hearthnet.services.rag.archives.archive import map_metadata
from hearthnet.services.rag.archives.merge import ArchiveHit, merge_hits
from hearthnet.services.rag.archives.search_tool import (
    FAILED,
    NO_ARCHIVES,
    NO_RESULTS,
    SYSTEM_PROMPT,
    ArchiveOutcome,
    ArchiveRef,
    SearchOutcome,
    clamp_top_k,
    effective_archives,
    format_json,
    format_passages,
    format_text,
    parse_rag_config,
    serves,
    tool_schema,
)
from hearthnet.services.rag.results import Hit

AIS = "repo_a1b2c3d4-e5f6-7890-abcd-ef1234567890"
WARTUNG = "repo_f9e8d7c6-b5a4-3210-fedc-ba0987654321"
JINA = "jinaai/jina-embeddings-v2-base-de"


def seed_format_results(all_results: list[dict[str, Any]], top_k: int) -> str:
    """Seed 000's ``search_archives`` after the query (section 4, Option A), copied as the oracle."""
    if not all_results:
        return "Keine relevanten Dokumente gefunden."
    all_results.sort(key=lambda r: r["distance"])
    formatted_parts: list[str] = []
    for idx, result in enumerate(all_results[:top_k], 1):
        metadata = result["metadata"]
        source_info = []
        if metadata.get("layer"):
            source_info.append(f"Ebene: {metadata['layer']}")
        if metadata.get("page_number"):
            source_info.append(f"Seite: {metadata['page_number']}")
        if metadata.get("section_heading"):
            source_info.append(f"Abschnitt: {metadata['section_heading']}")
        header = f"[{idx}] Archiv: {result['archive']}"
        if source_info:
            header += f" ({', '.join(source_info)})"
        formatted_parts.append(f"{header}\n{result['text']}")
    return "\n\n---\n\n".join(formatted_parts)


def hit(archive: str, text: str, score: float, rank: int = 1, source: int = 0, **raw: Any) -> ArchiveHit:
    return ArchiveHit(
        archive=archive,
        collection_name=AIS,
        server="http://chromadb:8000",
        embedding_model=JINA,
        hit=Hit(chunk_id=f"{archive}:{rank}:{source}", text=text, metadata=map_metadata(raw), score=score),
        rank=rank,
        source=source,
    )


def test_the_seeds_example_byte_for_byte() -> None:
    """Seed 001, "German output format — identical to Python"."""
    expected = (
        "[1] Archiv: Wartungsprotokoll (Ebene: chunk, Seite: 3)\n"
        "Die Heizungsanlage wurde am 15. Januar 2025 gewartet...\n"
        "\n"
        "---\n"
        "\n"
        "[2] Archiv: Betriebskostenabrechnung (Ebene: chunk, Seite: 12)\n"
        "Die Kosten für die Heizungswartung betrugen..."
    )
    hits = [
        hit(
            "Wartungsprotokoll",
            "Die Heizungsanlage wurde am 15. Januar 2025 gewartet...",
            0.9,
            layer="chunk",
            page_number=3,
        ),
        hit(
            "Betriebskostenabrechnung",
            "Die Kosten für die Heizungswartung betrugen...",
            0.8,
            layer="chunk",
            page_number=12,
        ),
    ]
    assert format_passages(hits) == expected


def test_every_source_field_and_their_order() -> None:
    """The issue's example: layer, page, section in that order, comma separated, in parentheses."""
    one = hit(
        "AIS Management Standard",
        "Audits finden jährlich statt.",
        0.7,
        layer="chunk",
        page_number=3,
        section_heading="4.2 Interne Audits",
        text_preview="Audits finden",
    )
    assert format_passages([one]) == (
        "[1] Archiv: AIS Management Standard (Ebene: chunk, Seite: 3, Abschnitt: 4.2 Interne Audits)\n"
        "Audits finden jährlich statt."
    )


def test_empty_fields_are_left_out_as_the_seed_does() -> None:
    """The seed writes a field only if it is truthy: page 0, an empty heading, no layer."""
    bare = hit("A", "text", 0.5)
    assert format_passages([bare]) == "[1] Archiv: A\ntext"
    zero = hit("A", "text", 0.5, layer="page", page_number=0, section_heading="")
    assert format_passages([zero]) == "[1] Archiv: A (Ebene: page)\ntext"


def test_a_line_break_in_a_header_field_cannot_fake_a_passage() -> None:
    sneaky = hit("A\n\n---\n\n[2] Archiv: B", "text", 0.5, section_heading="Intro\nmore")
    assert format_passages([sneaky]) == "[1] Archiv: A  ---  [2] Archiv: B (Abschnitt: Intro more)\ntext"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),  # archive
            st.integers(0, 128),  # distance in 1/64
            st.text(min_size=1, max_size=40),  # text
            st.sampled_from(["chunk", "page", "", None]),
            st.one_of(st.none(), st.integers(0, 500)),
            st.one_of(st.none(), st.text(alphabet=st.characters(blacklist_categories=("Cc", "Zl", "Zp")))),
        ),
        max_size=12,
        unique_by=lambda t: " ".join(t[2].split()).casefold(),
    ),
    st.integers(1, 20),
)
def test_merge_and_format_equal_the_seeds_code(rows: list[tuple[Any, ...]], top_k: int) -> None:
    """For one model (the seeds' case), ranking and text are the seed's, whatever the segments."""
    names = ["AIS Management Standard", "Wartungsdokumentation", "Betrieb"]
    seed_rows, hits = [], []
    ranks: dict[int, int] = {}
    for source, dist64, text, layer, page, section in rows:
        raw = {
            k: v
            for k, v in (("layer", layer), ("page_number", page), ("section_heading", section))
            if v is not None
        }
        seed_rows.append({"archive": names[source], "text": text, "metadata": raw, "distance": dist64 / 64})
        ranks[source] = ranks.get(source, 0) + 1
        hits.append(hit(names[source], text, 1.0 - dist64 / 64, ranks[source], source, **raw))
    # the seed keeps archive order, then each archive's own order, among equal distances
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])
    seed_rows = [seed_rows[i] for i in order]
    ranked, how = merge_hits(hits)
    assert how == "score"
    assert format_passages([r.hit for r in ranked[:top_k]]) == seed_format_results(seed_rows, top_k)


def outcome(*archives: ArchiveOutcome) -> SearchOutcome:
    ranked, how = merge_hits([h for a in archives for h in a.hits])
    return SearchOutcome(results=ranked, merge=how, archives=list(archives))


REF = ArchiveRef("AIS Management Standard", AIS, "http://chromadb:8000", JINA)


def test_the_seeds_messages() -> None:
    ok_empty = ArchiveOutcome(REF, "ok")
    gone = ArchiveOutcome(REF, "unavailable", error=Partition("archive: ChromaDB unreachable"))
    missing = ArchiveOutcome(REF, "unavailable", error=NotFound("collection does not exist"))
    broken = ArchiveOutcome(REF, "failed", error=Partition("no embed.text provider for model x"))
    assert format_text(outcome(ok_empty, gone)) == NO_RESULTS == "Keine relevanten Dokumente gefunden."
    assert format_text(outcome(gone, missing)) == NO_ARCHIVES == "Keine Archive verfügbar."
    assert format_text(outcome(gone, broken)) == FAILED == "Archivsuche fehlgeschlagen"
    found = ArchiveOutcome(REF, "ok", [hit(REF.name, "Text", 0.9, layer="chunk")])
    assert format_text(outcome(found, broken)) == f"[1] Archiv: {REF.name} (Ebene: chunk)\nText"


def test_json_gives_the_passages_and_each_archives_fate() -> None:
    found = ArchiveOutcome(
        REF,
        "ok",
        [hit(REF.name, "Text", 0.875, layer="chunk", page_number=3, text_preview="Te")],
        route="direct",
    )
    gone = ArchiveOutcome(
        ArchiveRef("Wartung", WARTUNG, "http://chromadb:8000", JINA),
        "unavailable",
        route="direct",
        error=Partition("archive Wartung: ChromaDB at http://chromadb:8000 is unreachable: ConnectError"),
    )
    doc = json.loads(format_json(outcome(found, gone)))
    assert doc["status"] == "ok" and doc["merge"] == "score" and doc["message"] == ""
    (result,) = doc["results"]
    assert result == {
        "rank": 1,
        "archive": REF.name,
        "collection_name": AIS,
        "chunk_id": f"{REF.name}:1:0",
        "score": 0.875,
        "fused": 0.875,
        "text": "Text",
        "metadata": {"layer": "chunk", "page": 3},
    }
    assert doc["archives"][1] == {
        "name": "Wartung",
        "collection_name": WARTUNG,
        "status": "unavailable",
        "route": "direct",
        "hits": 0,
        "error": {
            "error": "partition",
            "message": "archive Wartung: ChromaDB at http://chromadb:8000 is unreachable: ConnectError",
        },
    }
    assert json.loads(format_json(outcome(gone)))["message"] == NO_ARCHIVES


# ------------------------------------------------------------------------------------ rag_config

DEFAULTS = ArchiveDefaults()


def entry(name: str, collection: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "collection_name": collection, **extra}


def test_a_calls_rag_config_replaces_the_default_wholly() -> None:
    """Seed 000, 2.2: the thread-level ``rag_config`` replaces the assistant-level one; the whole
    ``archives`` list, not a deep merge."""
    default = {"archives": [entry("AIS Management Standard", AIS), entry("Wartungsdokumentation", WARTUNG)]}
    call = {
        "rag_config": {"archives": [entry("AIS Management Standard", AIS, chromadb_url="http://c2:8000")]}
    }
    (only,) = effective_archives(call, default, DEFAULTS)
    assert (only.name, only.chromadb_url) == ("AIS Management Standard", "http://c2:8000")
    assert [a.name for a in effective_archives({"user_id": "u"}, default, DEFAULTS)] == [
        "AIS Management Standard",
        "Wartungsdokumentation",
    ]


@pytest.mark.parametrize(
    "call",
    [
        {"rag_config": {"archives": []}},
        {"rag_config": {}},
        {"rag_config": None},
        {"rag_config": {"archives": None}},
    ],
)
def test_an_empty_rag_config_in_a_call_offers_no_tool_even_with_a_default(call: dict[str, Any]) -> None:
    default = {"archives": [entry("AIS", AIS)]}
    assert effective_archives(call, default, DEFAULTS) == []


def test_no_rag_config_anywhere_offers_no_tool() -> None:
    assert effective_archives({"model_name": "openai:gpt-4o-mini"}, None, DEFAULTS) == []
    assert effective_archives(None, None, DEFAULTS) == []


def test_left_out_fields_take_the_seed_defaults_and_unknown_keys_are_ignored() -> None:
    (a,) = parse_rag_config({"archives": [entry("AIS", AIS, repository_id="x")], "extra": 1}, DEFAULTS)
    assert a == ArchiveRef("AIS", AIS, "http://chromadb:8000", JINA)
    env = archive_defaults({"DOCPROC_CHROMADB_URL": "http://chroma.lan:8001"})
    assert (
        parse_rag_config({"archives": [entry("AIS", AIS)]}, env)[0].chromadb_url == "http://chroma.lan:8001"
    )
    given = entry("AIS", AIS, chromadb_url="http://mine:1", embedding_model="m")
    assert parse_rag_config({"archives": [given]}, env)[0] == ArchiveRef("AIS", AIS, "http://mine:1", "m")


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ([], "rag_config must be an object"),
        ({"archives": {"name": "x"}}, "rag_config.archives must be a list"),
        ({"archives": ["AIS"]}, r"rag_config.archives\[0\] must be an object"),
        ({"archives": [{"collection_name": AIS}]}, r"rag_config.archives\[0\].name must be a string"),
        ({"archives": [entry("AIS", "../../etc")]}, r"rag_config.archives\[0\].collection_name must be"),
        (
            {"archives": [entry("AIS", AIS, chromadb_url="file:///etc")]},
            r"\[0\].chromadb_url must be an http",
        ),
        ({"archives": [entry("AIS", AIS, embedding_model="")]}, r"\[0\].embedding_model must be a string"),
        ({"archives": [entry("A\nB", AIS)]}, r"\[0\].name must be a string of 1-200 printable"),
        ({"archives": [entry(f"A{i}", AIS) for i in range(17)]}, "names 17 archives; at most 16"),
    ],
)
def test_a_malformed_rag_config_is_a_clear_bad_request(raw: Any, fragment: str) -> None:
    with pytest.raises(BadRequest, match=fragment):
        parse_rag_config(raw, DEFAULTS)


@pytest.mark.parametrize(
    ("value", "clamped"),
    [
        (None, 5),
        (0, 1),
        (-3, 1),
        (1, 1),
        (7, 7),
        (20, 20),
        (25, 20),
        (10**9, 20),
        ("5", 5),
        (" 8 ", 8),
        (3.0, 3),
    ],
)
def test_top_k_is_clamped_to_1_20(value: Any, clamped: int) -> None:
    assert clamp_top_k(value, 5) == clamped


@pytest.mark.parametrize("value", [True, 2.5, float("nan"), "five", [], {}])
def test_a_top_k_that_is_no_whole_number_is_refused(value: Any) -> None:
    with pytest.raises(BadRequest, match="top_k"):
        clamp_top_k(value, 5)


def test_the_tool_definition_and_system_prompt() -> None:
    spec = tool_schema(5)["function"]
    assert spec["name"] == "search_archives" and spec["parameters"]["required"] == ["query"]
    assert spec["parameters"]["properties"]["top_k"] | {"description": ""} == {
        "type": "integer",
        "minimum": 1,
        "maximum": 20,
        "default": 5,
        "description": "",
    }
    assert SYSTEM_PROMPT.startswith(
        'Du hast Zugriff auf Dokumentenarchive. Verwende das Tool "search_archives",\n'
    )


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (
            {
                "corpus": "ais",
                "chromadb_url": "http://ChromaDB:8000/",
                "collection_name": AIS,
                "embedding_model": JINA,
            },
            True,
        ),
        (
            {
                "corpus": "ais",
                "chromadb_url": "http://chromadb:8001",
                "collection_name": AIS,
                "embedding_model": JINA,
            },
            False,
        ),
        (
            {
                "corpus": "ais",
                "chromadb_url": "http://chromadb:8000",
                "collection_name": WARTUNG,
                "embedding_model": JINA,
            },
            False,
        ),
        (
            {
                "corpus": "ais",
                "chromadb_url": "http://chromadb:8000",
                "collection_name": AIS,
                "embedding_model": "m",
            },
            False,
        ),
        ({"corpus": "docs", "embedding_model": JINA}, False),  # a local corpus, not an archive
        ({"corpus": "ais", "chromadb_url": 5, "collection_name": AIS, "embedding_model": JINA}, False),
        (
            {
                "corpus": "ais",
                "chromadb_url": "http://h:99999",
                "collection_name": AIS,
                "embedding_model": JINA,
            },
            False,
        ),
    ],
)
def test_which_rag_query_provider_serves_an_archive(params: dict[str, Any], expected: bool) -> None:
    assert serves(params, REF) is expected

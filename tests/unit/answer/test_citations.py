"""Citations are checked as the answer streams: ids not in the context are removed and counted."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.answer.citations import CitationCheck, check_citations, neutralised, sources
from hearthnet.answer.hits import Hit
from hearthnet.contracts.markers import MAX_MARKER_CHARS, Brackets, marker_ids

A = "3f2a9c0d1e2b4a5f6c7d8e9f0a1b2c3d"
B = "0123456789abcdef0123456789abcdef"
MADE_UP = "ffffffffffffffffffffffffffffffff"


def hit(chunk_id: str, score: float, filename: str) -> Hit:
    return Hit(
        chunk_id=chunk_id,
        text="...",
        score=score,
        corpus="house",
        node="ed25519:host",
        embedding_model="all-MiniLM-L6-v2",
        rank=1,
        metadata={
            "doc_cid": "blake3:" + "a" * 64,
            "doc_title": "Heating handbook",
            "page": 4,
            "filename": filename,
        },
    )


CONTEXT = {A: hit(A, 0.71, "heating.pdf"), B: hit(B, 0.55, "solar.pdf")}


def test_valid_citations_are_kept_and_listed_once_in_order_of_first_appearance() -> None:
    text = f"Bleed radiators [heating.pdf#{A}]. Panels face south [solar.pdf#{B}]; also [heating.pdf#{A}]."
    checked = check_citations(text, CONTEXT)
    assert checked.text == text and checked.cited == [A, B] and checked.removed == 0


def test_a_cited_id_not_in_the_context_is_removed_and_counted() -> None:
    text = f"Radiators need bleeding [heating.pdf#{A}]. Boilers explode weekly [boiler.pdf#{MADE_UP}]."
    checked = check_citations(text, CONTEXT)
    assert checked.text == f"Radiators need bleeding [heating.pdf#{A}]. Boilers explode weekly."
    assert checked.cited == [A] and checked.removed == 1


def test_a_bracket_of_several_keeps_its_valid_ones_and_names_each_by_its_context_file() -> None:
    # the model got one file name wrong and made one id up: the id decides, the file is the context's
    text = f"Both [wrong.pdf#{B}; heating.pdf#{MADE_UP}, heating.pdf#{A.upper()}]."
    checked = check_citations(text, CONTEXT)
    assert checked.text == f"Both [solar.pdf#{B}; heating.pdf#{A}]."
    assert checked.cited == [B, A] and checked.removed == 1


def test_brackets_without_a_hash_are_text() -> None:
    text = "Step [1] comes first; see [the manual] and C# [sic]."
    checked = check_citations(text, CONTEXT)
    assert checked.text == text and checked.cited == [] and checked.removed == 0


@pytest.mark.parametrize(
    "marker",
    ["[secret-plans.pdf#p4]", "[a#b]", "[x y#§1]", "[section #3]", "[#]", "[ heating.pdf # ]", "[a#b, c#d]"],
)
def test_every_marker_that_names_no_chunk_of_the_context_is_removed_whatever_its_shape(marker: str) -> None:
    checked = check_citations(f"Read it {marker} now.", CONTEXT)
    assert checked.text == "Read it now." and checked.cited == [] and checked.removed >= 1


def test_a_marker_keeps_its_valid_refs_and_drops_what_follows_an_id() -> None:
    checked = check_citations(f"See [heating.pdf#{A} p. 4, notes; secret#p4].", CONTEXT)
    assert checked.text == f"See [heating.pdf#{A}]." and checked.removed == 1


def test_a_marker_cut_off_at_the_end_is_dropped_and_an_unclosed_bracket_cannot_close_later() -> None:
    assert check_citations(f"Done [heating.pdf#{A}", CONTEXT).text == "Done"
    assert check_citations("Done [and more", CONTEXT).text == "Done [and more"
    # another "[" opens inside: the first cannot be a marker, and is shown as "("
    text = "a [b [c] d#e]"
    assert check_citations(text, CONTEXT).text == "a (b [c] d#e]"
    long = "x [" + "y" * MAX_MARKER_CHARS + "#p4] z"
    out = check_citations(long, CONTEXT).text
    assert out == long.replace("[", "(") and not BOGUS.search(out)


def test_quoted_document_text_cannot_pose_as_a_citation() -> None:
    quote = neutralised("As planned [secret-plans.pdf#p4], see [1].")
    assert quote == "As planned (secret-plans.pdf#p4), see (1)."
    assert check_citations(quote, CONTEXT).text == quote


BOGUS = re.compile(r"\[[^\[\]]*#[^\[\]]*\]")
"""Any closed bracket with a "#" in it (what the Ask page used to turn into a chip)."""
PIECES = st.sampled_from(
    ["[", "]", "#", " ", "\t", "a", "b", ",", ";", "§", "\n", f"heating.pdf#{A}", f"[solar.pdf#{B}]", A[:6]]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=60), st.data(), st.sampled_from([MAX_MARKER_CHARS, 40, 9]))
def test_any_split_of_an_answer_into_deltas_streams_exactly_the_checked_answer(
    pieces: list[str], data: st.DataObject, limit: int
) -> None:
    text = "".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=12)))
    deltas = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    check = CitationCheck(CONTEXT, limit=limit)
    streamed = [check.feed(d) for d in deltas] + [check.close()]
    one = CitationCheck(CONTEXT, limit=limit)
    one.feed(text)
    one.close()
    whole = one.checked()
    assert "".join(streamed) == whole.text and check.checked() == whole
    # every closed bracket holding a "#" that gets through names a chunk of the context
    for found in BOGUS.finditer(whole.text):
        assert all(i in CONTEXT for i in marker_ids(found.group()[1:-1])), found.group()


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="[]#ab ,;\n", max_size=80), st.integers(2, 12))
def test_a_bracket_span_is_held_no_longer_than_the_bound(text: str, limit: int) -> None:
    brackets = Brackets(limit)
    out = brackets.feed(text)
    fed = "".join(p if isinstance(p, str) else p.text for p in out)
    assert len(text) - len(fed) <= limit  # what is held back is one span within the bound


def test_sources_list_the_cited_chunks_first_then_the_uncited_context() -> None:
    context = [CONTEXT[A], CONTEXT[B], hit("c" * 32, 0.3, "garden.pdf")]
    out = sources(context, [B])
    assert [s["chunk_id"] for s in out] == [B, A, "c" * 32]
    assert [s["cited"] for s in out] == [True, False, False]
    assert out[0] == {
        "chunk_id": B,
        "text": "...",
        "title": "Heating handbook",
        "file": "solar.pdf",
        "page": 4,
        "place": "page 4",
        "anchor": "page=4",
        "doc_cid": "blake3:" + "a" * 64,
        "corpus": "house",
        "node": "ed25519:host",
        "score": 0.55,
        "cited": True,
    }


def test_a_file_name_is_made_safe_to_cite() -> None:
    odd = hit(A, 0.5, "report, 2024; [final]#2.pdf")
    assert odd.file == "report 2024 final 2.pdf"
    checked = check_citations(f"See [{odd.file}#{A}].", {A: odd})
    assert checked.cited == [A] and checked.text == f"See [report 2024 final 2.pdf#{A}]."

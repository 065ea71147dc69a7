"""Citations are checked after generation: ids not in the context are removed and counted."""

from __future__ import annotations

from hearthnet.answer.citations import check_citations, sources
from hearthnet.answer.hits import Hit

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


def test_brackets_that_are_not_citations_are_left_alone() -> None:
    text = "Step [1] comes first; see [section #3] and [the manual]."
    checked = check_citations(text, CONTEXT)
    assert checked.text == text and checked.cited == [] and checked.removed == 0


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

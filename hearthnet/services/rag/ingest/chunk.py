"""Split page texts into overlapping chunks that fit the embedder.

Pure functions, no I/O.  The text is cut into *pieces* (a run of non-space
characters, or a single CJK character; an over-long piece is cut further), and
each gap between pieces has a strength: paragraph > sentence > line > word.
A sliding window takes as many pieces as fit ``tokens_per_chunk`` (estimated
by :mod:`hearthnet.services.rag.ingest.tokens`), then ends the chunk at the strongest
boundary in its second half; the next chunk starts at the strongest boundary
that keeps at most ``overlap_tokens`` of overlap.

Invariants (property-tested): every non-whitespace character is in some chunk
``text[char_start:char_end]``; a chunk's estimated tokens never exceed
``tokens_per_chunk``; consecutive chunks on a page leave no gap and overlap by
at most ``overlap_tokens``; ids are deterministic.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from typing import Any

from hearthnet.errors import BadRequest
from hearthnet.services.rag.chunks import Chunk, check_extra_metadata, chunk_id_for
from hearthnet.services.rag.ingest.read import Document, PageText
from hearthnet.services.rag.ingest.tokens import DEFAULT_COUNTER, TokenCounter
from hearthnet.services.rag.low_text import LOW_TEXT, low_text_page

__all__ = [
    "MAX_CHUNK_CHARS",
    "MAX_CHUNK_TOKENS",
    "MIN_CHUNK_TOKENS",
    "PageChunker",
    "chunk_document",
    "chunk_params_for",
    "chunk_text",
    "detect_language",
]

MAX_CHUNK_TOKENS = 1000  # the spec's default: never larger, even for long-context embedders
MAX_CHUNK_CHARS = 8192
"""``embed.text`` takes texts of at most 8192 characters: a chunk's span never exceeds it,
however much whitespace (a padded table, a PDF text layer full of spaces) sits between its words."""
MIN_CHUNK_TOKENS = 8
SPECIAL_TOKENS = 2  # [CLS] and [SEP]
ESTIMATOR_HEADROOM = 0.85  # room for the estimator's error (see specs/rag.md, calibration)
_PARA, _SENT, _LINE, _WORD = 3, 2, 1, 0
_CJK_CHAR = (
    "\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
)
_PIECE = re.compile(rf"[{_CJK_CHAR}]|[^\s{_CJK_CHAR}]+")
_SENT_END = re.compile(r"[.!?\u2026\u3002\uff01\uff1f\u061f][\"'\u201d\u2019)\]\u300d\u300f]*$")
_PARA_GAP = re.compile(r"\n[^\S\n]*\n")


def chunk_params_for(max_tokens: int) -> tuple[int, int]:
    """``(tokens_per_chunk, overlap_tokens)`` for an embedder that reads ``max_tokens`` tokens."""
    if max_tokens < MIN_CHUNK_TOKENS + SPECIAL_TOKENS:
        raise BadRequest(f"embedder max_tokens {max_tokens} is too small to chunk for")
    size = min(MAX_CHUNK_TOKENS, int((max_tokens - SPECIAL_TOKENS) * ESTIMATOR_HEADROOM))
    return size, round(size * 0.15)


def _pieces(text: str, max_piece: int, max_chars: int, counter: TokenCounter) -> list[tuple[int, int, int]]:
    """``(start, end, cost)`` of each piece; none costs over ``max_piece`` or spans over ``max_chars``."""
    out: list[tuple[int, int, int]] = []
    for m in _PIECE.finditer(text):
        start, end = m.span()
        cost = counter.count(text[start:end])
        if cost <= max_piece and end - start <= max_chars:
            out.append((start, end, cost))
            continue
        # A giant "word" (no spaces): cut it into windows that fit.
        pos = start
        while pos < end:
            width = min(end - pos, max_piece, max_chars)
            while width > 1 and counter.count(text[pos : pos + width]) > max_piece:
                width //= 2
            out.append((pos, pos + width, counter.count(text[pos : pos + width])))
            pos += width
    return out


def _levels(text: str, pieces: list[tuple[int, int, int]]) -> list[int]:
    """Strength of the boundary *before* each piece (index 0 unused)."""
    levels = [_PARA] * (len(pieces) + 1)
    for i in range(1, len(pieces)):
        prev_start, prev_end, _ = pieces[i - 1]
        gap = text[prev_end : pieces[i][0]]
        if _PARA_GAP.search(gap):
            levels[i] = _PARA
        elif _SENT_END.search(text[prev_start:prev_end]) and (gap or _is_cjk_punct(text[prev_end - 1])):
            levels[i] = _SENT
        elif "\n" in gap:
            levels[i] = _LINE
        else:
            levels[i] = _WORD
    return levels


def _is_cjk_punct(ch: str) -> bool:
    return ch in "\u3002\uff01\uff1f"


def chunk_text(
    text: str,
    *,
    tokens_per_chunk: int,
    overlap_tokens: int,
    metadata: Mapping[str, Any] | None = None,
    counter: TokenCounter = DEFAULT_COUNTER,
    max_chars: int = MAX_CHUNK_CHARS,
) -> list[Chunk]:
    """Chunks of one text (one page); ``metadata`` is copied into every chunk.

    Besides the token budget, a chunk spans at most ``max_chars`` characters
    (whitespace included), so long runs of spaces cannot make it too long to embed.
    """
    if tokens_per_chunk < MIN_CHUNK_TOKENS:
        raise ValueError(f"tokens_per_chunk must be >= {MIN_CHUNK_TOKENS}")
    if not 0 <= overlap_tokens < tokens_per_chunk // 2 + 1:
        raise ValueError("overlap_tokens must be in [0, tokens_per_chunk / 2]")
    if max_chars < 2:
        raise ValueError("max_chars must be >= 2")
    base = dict(metadata or {})
    pieces = _pieces(text, max(2, tokens_per_chunk // 4), max_chars, counter)
    if not pieces:
        return []
    levels = _levels(text, pieces)
    prefix = [0]
    for _, _, cost in pieces:
        prefix.append(prefix[-1] + cost)
    starts = [p[0] for p in pieces]
    ends = [p[1] for p in pieces]
    n = len(pieces)
    spans: list[tuple[int, int]] = []
    start = 0
    while start < n:
        limit = prefix[start] + tokens_per_chunk
        end = max(start + 1, bisect.bisect_right(prefix, limit) - 1)
        # ... and within max_chars of its first character (one piece always fits).
        end = max(start + 1, min(end, bisect.bisect_right(ends, starts[start] + max_chars)))
        if end < n:
            half = bisect.bisect_left(prefix, prefix[start] + tokens_per_chunk // 2)
            lo = max(start + 1, min(half, end))
            end = max(range(lo, end + 1), key=lambda b: (levels[b], b))
        while (
            end > start + 1 and counter.count(text[pieces[start][0] : pieces[end - 1][1]]) > tokens_per_chunk
        ):
            end -= 1
        spans.append((start, end))
        if end >= n:
            break
        nxt = end
        if overlap_tokens > 0:
            first = bisect.bisect_left(prefix, prefix[end] - overlap_tokens, lo=start + 1, hi=end)
            # The next chunk must reach past this one within max_chars, or it would repeat it.
            first = max(first, bisect.bisect_left(starts, ends[end] - max_chars, lo=start + 1, hi=end))
            if first < end:
                nxt = max(range(first, end), key=lambda b: (levels[b], -b))
        start = nxt
    doc_cid = str(base.get("doc_cid", ""))
    page = int(base.get("page", 0))
    chunks: list[Chunk] = []
    for index, (a, b) in enumerate(spans):
        c_start, c_end = pieces[a][0], pieces[b - 1][1]
        body = text[c_start:c_end]
        meta = {
            **base,
            "chunk_index": index,
            "char_start": c_start,
            "char_end": c_end,
            "tokens": counter.count(body),
        }
        chunks.append(Chunk(chunk_id=chunk_id_for(doc_cid, index, c_start, page), text=body, metadata=meta))
    return chunks


class PageChunker:
    """Chunks a document page by page; ``chunk_index`` (and so ``chunk_id``) runs across pages.

    Feeding every page of a document in order gives exactly :func:`chunk_document`'s
    chunks, so a document can be chunked while it is still being read.
    """

    def __init__(
        self,
        *,
        doc_cid: str,
        doc_title: str,
        language: str,
        max_tokens: int,
        overlap_ratio: float = 0.15,
        extra_metadata: Mapping[str, Any] | None = None,
        doc_filename: str | None = None,
    ) -> None:
        if not 0.0 <= overlap_ratio <= 0.5:
            raise BadRequest("overlap_ratio must be between 0 and 0.5")
        self._filename = {"doc_filename": doc_filename} if doc_filename else {}
        self._size, _ = chunk_params_for(max_tokens)
        self._overlap = round(self._size * overlap_ratio)
        self._extra = check_extra_metadata(extra_metadata)
        self._doc_cid = doc_cid
        self._doc_title = doc_title
        self._language = language
        self.count = 0
        """Chunks produced so far."""

    def chunks_of(self, page: PageText) -> list[Chunk]:
        meta = {
            **self._extra,
            "doc_cid": self._doc_cid,
            "doc_title": self._doc_title,
            **self._filename,
            "page": page.page,
            "language": self._language,
        }
        if page.ocr:
            meta["ocr"] = True  # the text was read off the page's image
        if low_text_page(page.text):
            meta[LOW_TEXT] = True  # a cover, a notice, a table of contents: ranked below content
        out: list[Chunk] = []
        for c in chunk_text(
            page.text, tokens_per_chunk=self._size, overlap_tokens=self._overlap, metadata=meta
        ):
            index = self.count
            m = {**c.metadata, "chunk_index": index}
            cid = chunk_id_for(self._doc_cid, index, int(m["char_start"]), page.page)
            out.append(Chunk(chunk_id=cid, text=c.text, metadata=m))
            self.count += 1
        return out


def chunk_document(
    doc: Document,
    *,
    doc_cid: str,
    doc_title: str,
    language: str,
    max_tokens: int,
    overlap_ratio: float = 0.15,
    extra_metadata: Mapping[str, Any] | None = None,
    doc_filename: str | None = None,
) -> list[Chunk]:
    """Chunks of every page; ``chunk_index`` runs across the document.

    ``language`` may be empty (or ``"auto"``) to detect it from the text; ``doc_filename``
    (when known) is kept in every chunk's metadata.
    """
    if not language or language == "auto":
        language = detect_language("\n".join(p.text for p in doc.pages[:20])[:20000])
    chunker = PageChunker(
        doc_cid=doc_cid,
        doc_title=doc_title,
        language=language,
        max_tokens=max_tokens,
        overlap_ratio=overlap_ratio,
        extra_metadata=extra_metadata,
        doc_filename=doc_filename,
    )
    out: list[Chunk] = []
    for page in doc.pages:
        out.extend(chunker.chunks_of(page))
    return out


_STOPWORDS: dict[str, frozenset[str]] = {
    "en": frozenset("the and of to in is that for it with as was on are be by this which or from".split()),
    "de": frozenset("der die das und ist nicht ein eine zu den von mit sich des auf für im dem".split()),
    "fr": frozenset("le la les et des est une un du en que pour dans qui pas sur au par avec".split()),
}
_SCRIPTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ja", re.compile(r"[\u3040-\u30ff]")),
    ("ko", re.compile(r"[\uac00-\ud7af]")),
    ("zh", re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf]")),
    ("ar", re.compile(r"[\u0600-\u06ff\u0750-\u077f]")),
    ("ru", re.compile(r"[\u0400-\u04ff]")),
    ("el", re.compile(r"[\u0370-\u03ff]")),
    ("he", re.compile(r"[\u0590-\u05ff]")),
)
_WORDS = re.compile(r"[^\W\d_]+")


def detect_language(text: str) -> str:
    """A cheap guess: ISO 639-1 code by script, then en/de/fr stopwords; ``"und"`` if unsure."""
    sample = text[:20000]
    letters = sum(1 for ch in sample if ch.isalpha())
    if letters == 0:
        return "und"
    counts = {code: len(rx.findall(sample)) for code, rx in _SCRIPTS}
    if counts["ja"] > 0.05 * letters:
        return "ja"
    for code in ("ko", "zh", "ar", "ru", "el", "he"):
        if counts[code] > 0.3 * letters:
            return code
    words = [w.lower() for w in _WORDS.findall(sample)]
    if not words:
        return "und"
    scores = {code: sum(1 for w in words if w in stop) for code, stop in _STOPWORDS.items()}
    best = max(scores, key=lambda c: scores[c])
    if scores[best] < max(2, 0.05 * len(words)):
        return "und"
    return best

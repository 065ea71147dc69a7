"""A fast, conservative token estimate for sizing chunks.

The RAG service must not import the embedder, so it cannot run the embedding
model's tokenizer; it only learns the model's ``max_tokens`` from the bus.  This
module estimates how many WordPiece tokens (BERT uncased vocabulary, as used by
all-MiniLM-L6-v2) a text becomes, erring on the high side so that chunks sized
with it are not truncated by the embedder.

Rules (one regex pass, additive over whitespace-separated pieces):

* a run of Latin letters of length ``L`` costs ``1 + (L - 1) // 4``, plus 1
  if ``L >= 8`` (long words split into more pieces), plus 1 per non-ASCII
  letter (umlauts, accents, ligatures and ``ß`` mostly fall out of whole-word
  vocabulary entries);
* a run of digits of length ``L`` costs ``1 + L // 2``;
* a CJK ideograph or kana character costs 1 (BERT splits CJK per
  character);
* a Hangul syllable costs 3: the uncased tokenizer decomposes it (NFD) into
  its 2-3 letters (jamo), which are mostly separate pieces;
* a letter of any other script (Arabic, Cyrillic, Greek, Hebrew, Indic, ...)
  costs 1 per character, because the vocabulary has few multi-character
  pieces for them;
* every other non-space character (punctuation, symbols) costs 1.

Calibration against the real tokenizer on the shared PDFs is in
``specs/rag.md`` and enforced by ``tests/unit/services/rag/ingest/test_chunk.py``.
"""

from __future__ import annotations

import re
from typing import Protocol

__all__ = ["DEFAULT_COUNTER", "ApproxTokenCounter", "TokenCounter", "count_tokens"]

# CJK unified ideographs (+ext A, compatibility), kana, hangul, CJK punctuation
# and full-width forms: one token per character.
_CJK = (
    "\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31a0-\u31ff"
    "\u3200-\u32ff\u3300-\u33ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff"
    "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef"
)
# Latin letters: ASCII, Latin-1 supplement, Latin extended A/B, and the Latin
# ligatures (U+FB00-FB06) that PDF extraction produces.
_LATIN = "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff\ufb00-\ufb06"
_HANGUL_SYLLABLES = "\uac00-\ud7a3"
_PATTERN = re.compile(
    rf"(?P<latin>[{_LATIN}]+)|(?P<digit>[0-9]+)|(?P<hangul>[{_HANGUL_SYLLABLES}])|(?P<cjk>[{_CJK}])"
    rf"|(?P<other>[^\s{_CJK}])",
)


class TokenCounter(Protocol):
    """Anything that estimates the embedder's token count of a text."""

    def count(self, text: str) -> int: ...


class ApproxTokenCounter:
    """The rules in the module docstring; stateless and thread-safe."""

    def count(self, text: str) -> int:
        total = 0
        for m in _PATTERN.finditer(text):
            kind = m.lastgroup
            n = m.end() - m.start()
            if kind == "latin":
                word = m.group()
                total += 1 + (n - 1) // 4 + (n >= 8) + sum(1 for c in word if c > "\x7f")
            elif kind == "digit":
                total += 1 + n // 2
            elif kind == "hangul":
                total += 3
            else:  # cjk or other: one character
                total += 1
        return total


DEFAULT_COUNTER = ApproxTokenCounter()


def count_tokens(text: str) -> int:
    """Estimated WordPiece tokens of ``text`` (without [CLS]/[SEP])."""
    return DEFAULT_COUNTER.count(text)

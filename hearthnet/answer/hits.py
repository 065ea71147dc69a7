"""A retrieved chunk as the composer carries it from retrieval to the answer's sources."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hearthnet.contracts.formats import anchor_of, place_of


@dataclass(frozen=True)
class Hit:
    """One chunk a ``rag.query`` answered: its text, similarity and where it came from."""

    chunk_id: str
    text: str
    score: float
    """The provider's similarity (higher is better), in its embedding model's scale."""
    corpus: str
    node: str
    """Node id of the provider that answered."""
    embedding_model: str
    rank: int
    """1-based rank in its corpus's answer."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    similarity: float | None = None
    """The cosine to the question when ``score`` is a hybrid or keyword query's score (what the
    similarity threshold is about); ``None``: ``score`` is the cosine."""

    @property
    def cosine(self) -> float:
        """The chunk's cosine to the question, whatever ranked it."""
        return self.score if self.similarity is None else self.similarity

    @property
    def title(self) -> str:
        title = self.metadata.get("doc_title")
        return title if isinstance(title, str) else ""

    @property
    def file(self) -> str:
        """What a citation names: the file name recorded at ingest, else the title, else the CID."""
        for key in ("doc_filename", "filename", "doc_title", "doc_cid"):
            value = _text(self.metadata.get(key))
            if value:
                return value
        return self.corpus

    @property
    def page(self) -> int | None:
        page = self.metadata.get("page")
        return page if isinstance(page, int) and not isinstance(page, bool) else None

    @property
    def place(self) -> str | None:
        """Where the chunk is, as a citation says it ("page 3", "slide 2 (Budget)", "sheet Bills,
        row 14", "Garden > Tools, paragraph 2")."""
        return place_of(self.metadata)

    @property
    def anchor(self) -> str | None:
        """The fragment that opens the document at the chunk's place (``page=3``, ``u2-4``)."""
        return anchor_of(self.metadata)

    @property
    def doc_cid(self) -> str:
        return _text(self.metadata.get("doc_cid"))


def _text(value: object) -> str:
    """A metadata string made safe for one line of a prompt and a citation.

    No brackets, ``#``, ``,`` or ``;`` (they delimit citations) and no line breaks.
    """
    if not isinstance(value, str):
        return ""
    cleaned = value
    for ch in "[]#,;":
        cleaned = cleaned.replace(ch, " ")
    return " ".join(cleaned.split())[:200]

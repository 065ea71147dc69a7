"""How much work reading one document may take, and the count kept while it is read.

A 50 KB PDF can make a parser work for minutes: 60 pages sharing one content stream that inflates
to 20 MiB each parse it again (issue 29).  :class:`ReadLimits` bounds the content streams a page
and a document may inflate and the operators they may hold (a reader refuses the document with a
``bad_request`` naming the limit as soon as one is passed), and the CPU seconds and memory of the
worker process a document is read in (:mod:`.isolated`).  Figures in ``specs/rag.md``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from hearthnet.errors import BadRequest

__all__ = ["ContentBudget", "ReadLimits"]

_BLOWN = "the file is damaged or built to blow up; re-export it"


@dataclass(frozen=True)
class ReadLimits:
    page_inflated_bytes: int = 16 << 20
    """Bytes of content streams one page may inflate to (the densest shared PDF page: 0.5 MB)."""
    document_inflated_bytes: int = 256 << 20
    """... all pages together (a 249-page book: 3.6 MB; 5,000 such pages: 75 MB)."""
    page_operators: int = 1_000_000
    """Content-stream operators of one page (the densest shared PDF page: 30 k)."""
    document_operators: int = 20_000_000
    """... all pages together."""
    cpu_seconds: float = 30.0
    """CPU seconds the worker may spend on a document, plus ``cpu_seconds_per_mib`` of its size."""
    cpu_seconds_per_mib: float = 10.0
    """(reading takes about 1 s of CPU per MiB of real PDF on a laptop core, 10 on a Pi's)"""
    memory_bytes: int = 1536 << 20
    """Address space of a worker process (its interpreter and pypdf take about 100 MiB)."""

    def cpu_for(self, size: int) -> float:
        """The CPU seconds a document of ``size`` bytes may take to read."""
        return self.cpu_seconds + self.cpu_seconds_per_mib * size / (1 << 20)

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ReadLimits:
        return cls(**data)


class ContentBudget:
    """The content streams of one document counted as they are parsed (one reading thread).

    :meth:`charge_bytes` and :meth:`charge_operators` raise :class:`BadRequest` naming the limit
    once the page's or the document's count passes it.
    """

    def __init__(self, limits: ReadLimits) -> None:
        self.limits = limits
        self.page = 0
        self.page_bytes = self.page_operators = 0
        self.document_bytes = self.document_operators = 0

    def start_page(self, number: int) -> None:
        self.page = number
        self.page_bytes = self.page_operators = 0

    def operators_left(self) -> int:
        """Operators the current page may still hold within both limits."""
        return min(
            self.limits.page_operators - self.page_operators,
            self.limits.document_operators - self.document_operators,
        )

    def charge_bytes(self, n: int) -> None:
        self.page_bytes += n
        self.document_bytes += n
        lim = self.limits
        self._check(
            (self.page_bytes, lim.page_inflated_bytes),
            (self.document_bytes, lim.document_inflated_bytes),
            "inflates to more than {:,} bytes of content streams",
            "inflated bytes",
        )

    def charge_operators(self, n: int) -> None:
        self.page_operators += n
        self.document_operators += n
        lim = self.limits
        self._check(
            (self.page_operators, lim.page_operators),
            (self.document_operators, lim.document_operators),
            "holds more than {:,} content-stream operators",
            "operators",
        )

    def _check(self, page: tuple[int, int], document: tuple[int, int], what: str, unit: str) -> None:
        """``bad_request`` if the page's or the document's ``(count, limit)`` is over its limit."""
        if page[0] > page[1]:
            raise BadRequest(
                f"page {self.page} of the PDF {what.format(page[1])} (the limit on {unit} per page): {_BLOWN}"
            )
        if document[0] > document[1]:
            raise BadRequest(
                f"the PDF {what.format(document[1])} by page {self.page} (the limit on {unit} per document): "
                f"{_BLOWN}"
            )

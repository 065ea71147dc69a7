"""A stored document read and chunked page by page: pages -> chunk groups, in a worker thread.

Each page goes from the reader (:mod:`.read`) to the chunker (:mod:`.chunk`) as it is read, so
the embedder (:mod:`.embed`) starts on the first pages while later ones are still being read.
A PDF page without a text layer that draws an image is read off its image by ``ocr.page``
(:mod:`.ocr`) where each page is taken, in :meth:`StreamedDocument.chunk_groups`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Protocol

from hearthnet.errors import BadRequest
from hearthnet.services.rag.chunks import Chunk
from hearthnet.services.rag.ingest.chunk import PageChunker, detect_language
from hearthnet.services.rag.ingest.read import (
    MAX_PDF_TEXT,
    MAX_TEXT_BYTES,
    Document,
    DocumentHeader,
    PageText,
    ocr_page_text,
    stream_document,
)
from hearthnet.services.rag.ingest.readers.common import Attachment


class ReadParts(Protocol):
    """Bytes in, a :class:`DocumentHeader` then the pages out, as :func:`~.read.stream_document`
    (which reads in this thread; :mod:`.isolated` reads in a worker process that can be stopped)."""

    def __call__(
        self, data: bytes, *, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool
    ) -> Generator[DocumentHeader | PageText | Attachment, None, None]: ...


PageOcr = Callable[[int, int], str | None]
"""``ocr(page, page_count)``: the text OCR reads off a scanned PDF page's image (blocking, called
from the reader's thread), or ``None`` if OCR cannot read that page."""


@dataclass(frozen=True)
class PreparedDocument:
    document: Document
    chunks: list[Chunk]
    language: str
    ocr_pages: tuple[int, ...] = ()
    """Pages whose text OCR read (they had no text layer)."""
    attachments: tuple[Attachment, ...] = ()
    """Files an e-mail carries: the ingest makes each a document of its own."""


LANGUAGE_PAGES = 5
"""Pages read before chunking starts: the document's language is guessed from them."""


class StreamedDocument:
    """Reads and chunks a document page by page (blocking: use it from a worker thread).

    Opening it reads the header, so an unreadable, encrypted or unsupported
    file fails here, before any work.  :meth:`chunk_groups` then yields the
    chunks of each page as it is read (after the first ``LANGUAGE_PAGES``,
    which decide the language); the chunks are exactly those of reading the
    whole document first.  :meth:`prepared` gives the whole result afterwards,
    :meth:`read_all` does both at once.  With ``ocr``, a scanned PDF page (no text layer, an
    image drawn) is read off its image, and a PDF with no text layer at all is not refused.
    ``read`` reads the bytes (default: :func:`~.read.stream_document`, in this thread).
    """

    def __init__(
        self,
        data: bytes,
        *,
        doc_cid: str,
        title: str,
        language: str | None,
        max_tokens: int,
        filename_hint: str | None,
        extra_metadata: Mapping[str, Any],
        max_text_bytes: int | None = MAX_TEXT_BYTES,
        ocr: PageOcr | None = None,
        read: ReadParts | None = None,
    ) -> None:
        self._parts = (read or stream_document)(
            data, filename_hint=filename_hint, max_text_bytes=max_text_bytes, scans_ok=ocr is not None
        )
        header = next(self._parts)
        assert isinstance(header, DocumentHeader)
        self.header = header
        self._doc_cid = doc_cid
        self._title = title or header.title_hint or doc_cid[:19]
        self._language = language
        self._max_tokens = max_tokens
        self._extra = extra_metadata
        self._filename = PurePath(filename_hint).name if filename_hint else None
        self._pages: list[PageText] = []
        self._chunks: list[Chunk] = []
        self._done = False
        self._ocr = ocr
        self._ocr_pages: list[int] = []
        self._attachments: list[Attachment] = []
        self._ocr_tried = 0
        self._ocr_chars = 0

    def chunk_groups(self) -> Generator[list[Chunk], None, None]:
        head: list[PageText] = []
        chunker: PageChunker | None = None
        with contextlib.closing(self._parts):
            for part in self._parts:
                if isinstance(part, Attachment):
                    self._attachments.append(part)
                if not isinstance(part, PageText):
                    continue
                if part.scanned and self._ocr is not None:
                    part = self._read_image_of(part.page)
                self._pages.append(part)
                if chunker is None:
                    head.append(part)
                    if len(head) < LANGUAGE_PAGES:
                        continue
                    chunker = self._chunker(head)
                    yield from self._chunked(chunker, head)
                else:
                    yield from self._chunked(chunker, [part])
            if chunker is None:  # fewer pages than LANGUAGE_PAGES
                yield from self._chunked(self._chunker(head), head)
        self._done = True

    def _read_image_of(self, page: int) -> PageText:
        assert self._ocr is not None
        self._ocr_tried += 1
        text = self._ocr(page, self.header.page_count)
        if text is None or not text.strip():  # unreadable (logged there) or blank: still no text
            return PageText(page=page, text="")
        self._ocr_chars += len(text)
        if self._ocr_chars > MAX_PDF_TEXT:
            raise BadRequest(
                f"OCR read more than {MAX_PDF_TEXT:,} characters by page {page} of "
                f"{self.header.page_count}: split the PDF into smaller files"
            )
        self._ocr_pages.append(page)
        return ocr_page_text(page, text)

    def _chunker(self, head: list[PageText]) -> PageChunker:
        if not self._language:
            self._language = detect_language(" ".join(p.text for p in head[:LANGUAGE_PAGES])[:20_000])
        return PageChunker(
            doc_cid=self._doc_cid,
            doc_title=self._title,
            language=self._language,
            max_tokens=self._max_tokens,
            extra_metadata=self._extra,
            doc_filename=self._filename,
        )

    def _chunked(self, chunker: PageChunker, pages: list[PageText]) -> Iterator[list[Chunk]]:
        for page in pages:
            chunks = chunker.chunks_of(page)
            self._chunks.extend(chunks)
            if chunks:
                yield chunks

    def read_all(self) -> PreparedDocument:
        """Blocking: read and chunk the whole document (:meth:`chunk_groups`, then :meth:`prepared`)."""
        for _ in self.chunk_groups():
            pass
        return self.prepared()

    def prepared(self) -> PreparedDocument:
        """The document and all its chunks, once :meth:`chunk_groups` is exhausted."""
        if not self._done:
            raise RuntimeError("read every chunk group first")
        if not self._chunks:
            if self._ocr_tried:
                raise BadRequest(
                    f"no text to index in {self._doc_cid}: {self._ocr_tried} of its "
                    f"{self.header.page_count} pages have no text layer and OCR found no text on them"
                )
            raise BadRequest(f"no text to index in {self._doc_cid}: the document has no extractable text")
        h = self.header
        document = Document(self._pages, h.content_type, h.title_hint, h.page_count)
        return PreparedDocument(
            document, self._chunks, str(self._language), tuple(self._ocr_pages), tuple(self._attachments)
        )

"""Turn uploaded bytes into page texts: PDF (pypdf), plain text, Markdown.

Every failure a user can cause is a :class:`BadRequest` with a message that
says what is wrong and what to do.  pypdf's diagnostics (its ``pypdf``
``logging`` logger and :mod:`warnings`) are routed into structlog as
``pypdf_warning`` events; they carry pypdf's message (about the file's
structure, truncated), never page text.  A document's first ``WARNINGS_LOGGED`` are written,
the rest counted into one ``pypdf_warning_repeated`` record at its end
(:class:`~hearthnet.runtime.log_summary.LogSummary`); so are its ``pdf_page_unreadable`` records.
The work a PDF's content streams take is bounded (:mod:`.limits`).

Plain text and Markdown (:data:`IN_PROCESS_TYPES`) need no parser and are read where they are
asked for; every other format is read in a worker process (:mod:`.isolated`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import threading
import warnings
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import PurePath

import pypdf
import structlog
from pypdf import PageObject, PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadWarning, PyPdfError
from pypdf.generic import ArrayObject, DictionaryObject, PdfObject, StreamObject

from hearthnet.contracts import formats
from hearthnet.contracts.rag import MAX_TITLE
from hearthnet.errors import BadRequest, InternalError
from hearthnet.runtime.log_summary import LogSummary
from hearthnet.services.rag.ingest import pdf_content
from hearthnet.services.rag.ingest.columns import ColumnOrder
from hearthnet.services.rag.ingest.limits import ContentBudget, ReadLimits

__all__ = [
    "CONTENT_TYPES",
    "IN_PROCESS_TYPES",
    "MAX_PAGE_TEXT",
    "MAX_PDF_TEXT",
    "MAX_TEXT_BYTES",
    "Document",
    "DocumentHeader",
    "PageText",
    "detect_content_type",
    "ocr_page_text",
    "read_document",
    "stream_document",
]

PDF = formats.PDF.content_type
TEXT = formats.TEXT.content_type
MARKDOWN = formats.MARKDOWN.content_type
CONTENT_TYPES: tuple[str, ...] = tuple(f.content_type for f in formats.FORMATS)
IN_PROCESS_TYPES: frozenset[str] = frozenset({TEXT, MARKDOWN})
"""Formats read in the node's own process: no parser, linear work on at most ``MAX_TEXT_BYTES``.
Every other format (a parser a hostile file can keep busy) is read in a worker process."""
WARNINGS_LOGGED = 20
"""pypdf warnings (and unreadable pages) written per document; the rest are counted."""
_MD_SUFFIXES = set(formats.MARKDOWN.suffixes)
_MAX_LOGGED_MESSAGE = 200
_PDF_MAGIC = formats.PDF.magic or b"%PDF-"
_PDF_HEADER_WINDOW = 1024
"""pypdf (like Acrobat) accepts junk before the ``%PDF-`` header within the first KiB."""
MAX_TEXT_BYTES = 4 << 20
"""A plain-text or Markdown file is chunked as one page: at most 4 MiB of it."""
MAX_PAGE_TEXT = 256 << 10
"""Characters of text one PDF page may yield: ten times the densest real page.  A few KiB of
compressed content stream can expand to millions of characters (minutes of chunking and
embedding, hundreds of MB of memory for one page)."""
MAX_PDF_TEXT = 16 << 20
"""Characters of text in all of a PDF's pages (a 5,000-page book of dense pages is ~15 M)."""

# Magic bytes of common types we do not read, to name them in the error.
_KNOWN_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
    (b"PK\x03\x04", "application/zip (e.g. docx, odt, epub)"),
    (b"\xd0\xcf\x11\xe0", "application/x-ole (e.g. doc, xls)"),
    (b"{\\rtf", "application/rtf"),
    (b"\x1f\x8b", "application/gzip"),
)

# Exceptions that pypdf lets escape from damaged files besides its own tree.
_PYPDF_INTERNAL = (
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    AttributeError,
    AssertionError,
    RecursionError,
)

_log = structlog.get_logger("hearthnet.rag.reader")

# pypdf's text extraction with a faster content-stream tokenizer; results are pypdf's own.
pdf_content.install()


@dataclass(frozen=True)
class PageText:
    """The text of one page; ``page`` is 1-based."""

    page: int
    text: str
    scanned: bool = False
    """No text, but the page draws an image (or pypdf could not parse it): OCR may read it."""
    ocr: bool = False
    """The text was read off the page's image by OCR."""


@dataclass(frozen=True)
class Document:
    """A read document: its pages in order and what we could learn about it."""

    pages: list[PageText]
    content_type: str
    title_hint: str | None
    page_count: int


@dataclass(frozen=True)
class DocumentHeader:
    """What is known about a document once it is open, before its pages are read."""

    content_type: str
    title_hint: str | None
    page_count: int


class _PypdfToStructlog(logging.Handler):
    """Forward records of the ``pypdf`` logger to structlog."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        _warning(
            "pypdf_warning",
            source="logging",
            level=record.levelname.lower(),
            pypdf_module=record.module,
            lineno=record.lineno,
            message=message[:_MAX_LOGGED_MESSAGE],
        )


_current = threading.local()
"""``summaries``: the :class:`LogSummary` of the document this thread reads now, by event."""


def _warning(event: str, **fields: object) -> None:
    summaries: dict[str, LogSummary] | None = getattr(_current, "summaries", None)
    if summaries is None:
        _log.warning(event, **fields)
    else:
        summaries[event].log("document", **fields)


@contextlib.contextmanager
def _summarised(summaries: dict[str, LogSummary]) -> Iterator[None]:
    """This thread's pypdf warnings and unreadable pages in the block count for one document."""
    before = getattr(_current, "summaries", None)
    _current.summaries = summaries
    try:
        yield
    finally:
        _current.summaries = before


def _document_summaries() -> dict[str, LogSummary]:
    return {
        event: LogSummary(_log.warning, event, first=WARNINGS_LOGGED, window=float("inf"))
        for event in ("pypdf_warning", "pdf_page_unreadable")
    }


_HANDLER = _PypdfToStructlog(level=logging.WARNING)
_install_lock = threading.Lock()
# ``warnings.catch_warnings`` changes process-global state; serialise it.
_warnings_lock = threading.Lock()


def route_pypdf_logging() -> None:
    """Send the ``pypdf`` logger to structlog instead of stderr (idempotent)."""
    with _install_lock:
        logger = logging.getLogger("pypdf")
        if _HANDLER not in logger.handlers:
            logger.addHandler(_HANDLER)
        logger.propagate = False


route_pypdf_logging()


def _is_utf8_text(data: bytes) -> bool:
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def detect_content_type(data: bytes, filename_hint: str | None = None) -> str:
    """The content type of ``data`` by its magic bytes (the file name only tells text from Markdown).

    A PDF starts with ``%PDF-``; junk before it (within the first KiB) is
    accepted only if the file is not UTF-8 text or is named ``*.pdf``, so a
    note that merely mentions ``%PDF-1.7`` stays text.
    """
    suffix = PurePath(filename_hint).suffix.lower() if filename_hint else ""
    if data.startswith(_PDF_MAGIC):
        return PDF
    for magic, name in _KNOWN_MAGIC:
        if data.startswith(magic):
            raise BadRequest(f"unsupported type {name}: supported are {formats.supported_text()}")
    text = _is_utf8_text(data)
    if _PDF_MAGIC in data[:_PDF_HEADER_WINDOW] and (suffix == ".pdf" or not text):
        return PDF
    if text:
        return MARKDOWN if suffix in _MD_SUFFIXES else TEXT
    if suffix == ".pdf":
        raise BadRequest("not a readable PDF: no %PDF header; re-export or repair it")
    raise BadRequest(
        "unsupported type application/octet-stream (binary, not UTF-8 text): "
        f"supported are {formats.supported_text()}"
    )


def read_document(data: bytes, *, filename_hint: str | None = None, max_pages: int = 5000) -> Document:
    """Read ``data`` into pages; raise :class:`BadRequest` with a specific hint if we cannot."""
    with contextlib.closing(stream_document(data, filename_hint=filename_hint, max_pages=max_pages)) as parts:
        header = next(parts)
        assert isinstance(header, DocumentHeader)
        pages = [p for p in parts if isinstance(p, PageText)]
    return Document(
        pages=pages,
        content_type=header.content_type,
        title_hint=header.title_hint,
        page_count=header.page_count,
    )


def stream_document(
    data: bytes,
    *,
    filename_hint: str | None = None,
    max_pages: int = 5000,
    max_text_bytes: int | None = MAX_TEXT_BYTES,
    scans_ok: bool = False,
    limits: ReadLimits | None = None,
) -> Generator[DocumentHeader | PageText, None, None]:
    """A :class:`DocumentHeader`, then the pages in order, read one at a time.

    Errors are those of :func:`read_document` and come as early as they can:
    an unreadable, encrypted or oversized file before the header, "no text on
    any page" after the last page (not with ``scans_ok`` when a page is
    ``scanned``: the caller has those read by OCR).  Close the generator if you
    stop early.  ``max_text_bytes=None`` lifts the text cap (a reindex re-reads
    what an older version already accepted).  ``limits`` bound a PDF's content streams
    (default :class:`ReadLimits`).
    """
    if len(data) == 0:
        raise BadRequest("file is empty (0 bytes)")
    ctype = detect_content_type(data, filename_hint)
    if ctype == PDF:
        yield from _stream_pdf(
            data, filename_hint=filename_hint, max_pages=max_pages, scans_ok=scans_ok, limits=limits
        )
        return
    doc = _read_text(data, ctype, filename_hint, max_text_bytes)
    yield DocumentHeader(doc.content_type, doc.title_hint, doc.page_count)
    yield from doc.pages


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""pypdf decodes ToUnicode maps with ``surrogatepass``: a glyph mapped to ``<D800>`` yields a
lone surrogate, which no UTF-8 encoder (msgpack, the tokenizer, ChromaDB) accepts."""
"""Characters of a document title: at most this from a caller, and what is kept of one found in
the file (a PDF's /Title, a Markdown heading); it is copied into every chunk's metadata."""


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return _LONE_SURROGATE.sub("\ufffd", text)


def _title(text: str | None) -> str | None:
    """A title hint as chunks carry it: clean, at most ``MAX_TITLE`` characters."""
    if text is None:
        return None
    return _clean(text).strip()[:MAX_TITLE] or None


def _stem(filename_hint: str | None) -> str | None:
    if not filename_hint:
        return None
    return PurePath(filename_hint).stem or None


def _read_text(data: bytes, ctype: str, filename_hint: str | None, max_bytes: int | None) -> Document:
    if max_bytes is not None and len(data) > max_bytes:
        raise BadRequest(
            f"text file is {len(data) / (1 << 20):.1f} MiB; at most {max_bytes / (1 << 20):g} MiB of text "
            "are supported: split it into smaller files"
        )
    text = _clean(data.decode("utf-8").removeprefix("\ufeff"))
    if not text.strip():
        raise BadRequest("text file contains only whitespace: nothing to index")
    title: str | None = None
    if ctype == MARKDOWN:
        m = re.search(r"^#\s+(.+?)\s*#*\s*$", text, flags=re.MULTILINE)
        title = m.group(1) if m else None
    return Document(
        pages=[PageText(page=1, text=text)],
        content_type=ctype,
        title_hint=_title(title) or _title(_stem(filename_hint)),
        page_count=1,
    )


def _corrupt(exc: BaseException) -> BadRequest:
    return BadRequest(f"not a readable PDF: {type(exc).__name__}; re-export or repair it")


def _password_error() -> BadRequest:
    return BadRequest("PDF is encrypted with a password; decrypt it first (e.g. qpdf --decrypt)")


class _UnsupportedEncryption(Exception):
    """pypdf has no handler for the file's security scheme (e.g. certificate-based /Adobe.PubSec)."""


class _Reader(PdfReader):
    """``PdfReader`` telling an unsupported security handler apart from other unsupported features.

    pypdf raises a bare ``NotImplementedError`` for both; here the one raised
    while setting up decryption becomes :class:`_UnsupportedEncryption`.  (Should
    pypdf rename the hook, that error gets the generic "unsupported feature" message.)
    """

    def _handle_encryption(self, password: str | bytes | None) -> None:
        try:
            super()._handle_encryption(password)
        except NotImplementedError as exc:
            raise _UnsupportedEncryption from exc


_Parts = Generator[DocumentHeader | PageText, None, None]


@contextlib.contextmanager
def _pypdf_warnings_logged() -> Iterator[None]:
    """Log the warnings pypdf raises in the block.  ``warnings.catch_warnings`` is process-global:
    one block at a time, each around one step of pypdf's work, never held while a reader waits.
    A warning that is not pypdf's (another thread's or task's) is passed on unchanged afterwards."""
    others: list[warnings.WarningMessage] = []
    try:
        with _warnings_lock, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield
            finally:
                for w in caught:
                    if not _from_pypdf(w):
                        others.append(w)
                        continue
                    _warning(
                        "pypdf_warning",
                        source="warnings",
                        category=w.category.__name__,
                        pypdf_module=PurePath(w.filename).stem,
                        lineno=w.lineno,
                        message=str(w.message)[:_MAX_LOGGED_MESSAGE],
                    )
    finally:
        for w in others:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


_PYPDF_DIR = PurePath(pypdf.__file__).parent


def _from_pypdf(w: warnings.WarningMessage) -> bool:
    """A warning pypdf raised: of its category, or from its code.  ``catch_warnings`` is
    process-wide, so a warning of another thread or task (a stream collected meanwhile) is
    caught too, and must keep its own identity."""
    return issubclass(w.category, PdfReadWarning) or PurePath(w.filename).is_relative_to(_PYPDF_DIR)


def _stream_pdf(
    data: bytes, *, filename_hint: str | None, max_pages: int, scans_ok: bool, limits: ReadLimits | None
) -> _Parts:
    summaries = _document_summaries()
    budget = ContentBudget(limits or ReadLimits())
    columns = ColumnOrder(data)  # a page with columns is read column by column
    try:
        with _summarised(summaries), _pypdf_warnings_logged():
            reader, page_count, title = _open_pdf(data, filename_hint=filename_hint, max_pages=max_pages)
        yield DocumentHeader(PDF, title, page_count)
        failed = unsupported = 0
        total = 0
        any_text = any_scan = False
        for number in range(1, page_count + 1):
            budget.start_page(number)
            with _summarised(summaries), _pypdf_warnings_logged(), pdf_content.counted(budget):
                page, error = _read_page(reader, number, budget)
            if page.text.strip() and (ordered := columns.text(number)) is not None:
                page = PageText(page=number, text=_clean(ordered), scanned=False)
            if error is not None:
                failed += 1
                unsupported += isinstance(error, NotImplementedError | DependencyError)
            total += len(page.text)
            if total > MAX_PDF_TEXT:
                raise BadRequest(
                    f"the PDF yields more than {MAX_PDF_TEXT:,} characters of text by page {number} of "
                    f"{page_count}: split it into smaller files"
                )
            any_text = any_text or bool(page.text.strip())
            any_scan = any_scan or page.scanned
            yield page
    finally:
        for summary in summaries.values():
            summary.flush()
        columns.close()
    if not any_text and not (scans_ok and any_scan):  # with OCR, scanned pages are read instead
        if failed == page_count:
            why = " (it uses PDF features this reader does not support)" if unsupported else ""
            raise BadRequest(
                f"not a readable PDF: none of {page_count} pages could be parsed{why}; re-export it"
            )
        raise BadRequest(f"no text layer on any of {page_count} pages: run OCR first (e.g. ocrmypdf)")


def _open_pdf(data: bytes, *, filename_hint: str | None, max_pages: int) -> tuple[PdfReader, int, str | None]:
    """The reader, the page count and the title hint, or the ``BadRequest`` of an unreadable file."""
    try:
        reader = _Reader(io.BytesIO(data))
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            raise _password_error()
        page_count = len(reader.pages)
    except FileNotDecryptedError as exc:
        raise _password_error() from exc
    except _UnsupportedEncryption as exc:
        raise BadRequest(
            "PDF is encrypted with a security handler this reader does not support (e.g. a "
            "certificate); decrypt it first (e.g. qpdf --decrypt)"
        ) from exc
    except (NotImplementedError, DependencyError) as exc:
        # DependencyError: a decoder pypdf needs and lacks (JBIG2), as a page's stream may
        # need one; our own missing dependency (cryptography, for AES) is our fault.
        if isinstance(exc, DependencyError) and any(w in str(exc).lower() for w in ("cryptography", "aes")):
            missing = "PDF needs an optional dependency that is not installed (cryptography)"
            raise InternalError(missing) from exc
        raise BadRequest(
            "not a readable PDF: it uses a PDF feature this reader does not support; re-export it "
            "(e.g. print it to a new PDF)"
        ) from exc
    except (PyPdfError, *_PYPDF_INTERNAL) as exc:
        raise _corrupt(exc) from exc
    if page_count == 0:
        raise BadRequest("PDF has no pages: nothing to index")
    if page_count > max_pages:
        raise BadRequest(f"PDF has {page_count} pages, at most {max_pages} are supported: split it")
    return reader, page_count, _pdf_title(reader) or _title(_stem(filename_hint))


def _read_page(reader: PdfReader, number: int, budget: ContentBudget) -> tuple[PageText, Exception | None]:
    """Page ``number``'s text (empty if pypdf cannot parse it: the error comes along, logged).
    Its content streams' inflated bytes are charged to ``budget`` before any is searched or parsed
    (their operators as they are parsed)."""
    error: Exception | None = None
    try:
        budget.charge_bytes(_content_bytes(reader.pages[number - 1]))
        with pdf_content.text_only():
            text = reader.pages[number - 1].extract_text() or ""
    except FileNotDecryptedError as exc:
        raise _password_error() from exc
    except (PyPdfError, NotImplementedError, DependencyError, *_PYPDF_INTERNAL) as exc:
        # NotImplementedError / DependencyError: e.g. a content stream compressed with a
        # filter pypdf lacks or needs an external program for (JBIG2).
        _warning("pdf_page_unreadable", page=number, error=type(exc).__name__)
        text, error = "", exc
    if len(text) > MAX_PAGE_TEXT:
        raise BadRequest(
            f"page {number} of the PDF yields {len(text):,} characters of text, more than any "
            f"real page ({MAX_PAGE_TEXT:,} at most): the file is damaged or built to blow up; "
            "re-export it"
        )
    text = _clean(text)
    scanned = not text.strip() and (error is not None or _draws_an_image(reader, number))
    return PageText(page=number, text=text, scanned=scanned), error


def _content_bytes(page: PageObject) -> int:
    """The inflated size of the page's content streams (pypdf keeps what it inflated for reuse)."""
    contents = _resolved(page.get("/Contents"))
    streams = contents if isinstance(contents, ArrayObject) else [contents]
    total = 0
    for stream in list(streams)[:_MAX_CONTENT_STREAMS]:
        stream = _resolved(stream)
        if isinstance(stream, StreamObject):
            total += len(stream.get_data())
    return total


def ocr_page_text(page: int, text: str) -> PageText:
    """Page ``page`` with the text OCR read off its image, cleaned as extracted text is."""
    return PageText(page=page, text=_clean(text), ocr=True)


_MAX_CONTENT_STREAMS = 10_000
_INLINE_IMAGE = re.compile(rb"(?:^|\s)BI\s")
_MAX_FORM_DEPTH = 4
_MAX_XOBJECTS = 256


def _draws_an_image(reader: PdfReader, number: int) -> bool:
    """Whether page ``number``, without text, draws an image (an image XObject, directly or in a
    form, or an inline image): a scan OCR can read, unlike a blank page.  Unsure (damaged): yes."""
    try:
        page = reader.pages[number - 1]
        if _resources_hold_an_image(page.get("/Resources"), _MAX_FORM_DEPTH):
            return True
        contents = page.get_contents()
        return contents is not None and _INLINE_IMAGE.search(contents.get_data()) is not None
    except (PyPdfError, NotImplementedError, DependencyError, *_PYPDF_INTERNAL):
        return True


def _resources_hold_an_image(resources: object, depth: int) -> bool:
    resources = _resolved(resources)
    if depth <= 0 or not isinstance(resources, DictionaryObject):
        return False
    xobjects = _resolved(resources.get("/XObject"))
    if not isinstance(xobjects, DictionaryObject):
        return False
    for ref in list(xobjects.values())[:_MAX_XOBJECTS]:
        xobject = _resolved(ref)
        if not isinstance(xobject, DictionaryObject):
            continue
        subtype = xobject.get("/Subtype")
        if subtype == "/Image":
            return True
        if subtype == "/Form" and _resources_hold_an_image(xobject.get("/Resources"), depth - 1):
            return True
    return False


def _resolved(obj: object) -> object:
    return obj.get_object() if isinstance(obj, PdfObject) else obj


def _pdf_title(reader: PdfReader) -> str | None:
    try:
        meta = reader.metadata
        title = meta.title if meta is not None else None
    except (PyPdfError, NotImplementedError, *_PYPDF_INTERNAL):
        return None
    return _title(title) if isinstance(title, str) else None

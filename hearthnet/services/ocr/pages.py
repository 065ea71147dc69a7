"""Bytes to one page image, bounded: a PNG or JPEG decoded, or one PDF page rendered (pypdfium2).

Blocking; called from worker threads.  Whatever the input claims, the image
handed to the engine is at most ``MAX_SIDE`` pixels on its long side (the
size the engine itself works at), so a page costs the same memory whatever
its declared size.  Every failure a caller can cause is a :class:`BadRequest`
saying what is wrong.
"""

from __future__ import annotations

import io
import math
import threading
import warnings
from dataclasses import dataclass

import pillow_heif
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from PIL import Image, ImageOps, UnidentifiedImageError

from hearthnet.contracts.ocr import MAX_IMAGE_PIXELS
from hearthnet.errors import BadRequest

__all__ = [
    "JPEG",
    "MAX_IMAGE_PIXELS",
    "MAX_SIDE",
    "PDF",
    "PNG",
    "PageImage",
    "kind_of",
    "open_image",
    "render_pdf_page",
]

PNG, JPEG, PDF = "image/png", "image/jpeg", "application/pdf"
TIFF, HEIC = "image/tiff", "image/heic"
"""A stored photo or scan (a TIFF, an iPhone's HEIC) is read too; an inline ``image`` is PNG or JPEG."""
_STORED_ONLY = {TIFF: ("TIFF",), HEIC: ("HEIF",)}
_TIFF_MAGIC = (b"II*\x00", b"MM\x00*")
_HEIF_BRANDS = frozenset({b"heic", b"heix", b"hevc", b"heim", b"heis", b"hevm", b"hevs", b"mif1", b"msf1"})

pillow_heif.register_heif_opener()
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8\xff"
_PDF_MAGIC = b"%PDF-"
_PDF_HEADER_WINDOW = 1024
"""PDF readers accept junk before the ``%PDF-`` header within the first KiB."""

MAX_SIDE = 2000
"""Pixels on an image's long side given to the engine: RapidOCR reduces anything larger to this
before detection, so a larger page only costs memory."""
MIN_SIDE = 8
"""Pixels an image must keep on its short side once within ``MAX_SIDE`` to hold a line of text."""

_PDFIUM_LOCK = threading.Lock()
"""PDFium is not thread-safe: one document operation at a time in this process."""


@dataclass(frozen=True)
class PageImage:
    """An image ready for the engine, and how its pixels map to the input's."""

    image: Image.Image
    width: int
    """Width of the input image (or of the page rendered at ``dpi``) in pixels."""
    height: int
    dpi: float | None
    """Resolution the PDF page was rendered at; ``None`` for an image input."""
    page_count: int | None = None
    """Pages of the PDF; ``None`` for an image input."""

    @property
    def scale(self) -> float:
        """Input pixels per pixel of ``image`` (1.0 unless the input was reduced)."""
        return self.width / self.image.width


def kind_of(data: bytes) -> str | None:
    """``PNG``, ``JPEG`` or ``PDF`` by magic bytes, else ``None``."""
    if data.startswith(_PNG_MAGIC):
        return PNG
    if data.startswith(_JPEG_MAGIC):
        return JPEG
    if data.startswith(_TIFF_MAGIC):
        return TIFF
    if data[4:8] == b"ftyp" and data[8:12] in _HEIF_BRANDS:
        return HEIC
    if _PDF_MAGIC in data[:_PDF_HEADER_WINDOW]:
        return PDF
    return None


def open_image(data: bytes, what: str = "input.image", *, stored: bool = False) -> PageImage:
    """Decode a PNG or JPEG (a ``stored`` one also TIFF or HEIC; EXIF orientation applied),
    reduced to ``MAX_SIDE`` if larger; errors name the image ``what``."""
    kind = kind_of(data)
    if stored and kind in _STORED_ONLY:
        allowed: list[str] = list(_STORED_ONLY[kind])
    elif kind in (PNG, JPEG):
        allowed = ["PNG", "JPEG"]
    else:
        found = "a PDF (send it as {doc_cid, page})" if kind == PDF else "neither PNG nor JPEG"
        if kind in _STORED_ONLY:
            found = f"{kind} (store it, then send it as {{doc_cid}})"
        raise BadRequest(f"{what} is not a PNG or JPEG image: its bytes are {found}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            opened = Image.open(io.BytesIO(data), formats=allowed)
            width, height = opened.size
            if width * height > MAX_IMAGE_PIXELS:
                raise BadRequest(
                    f"image is {width}x{height} pixels, over the {MAX_IMAGE_PIXELS:,} pixel limit: "
                    "scan or export it at a lower resolution"
                )
            if max(width, height) > MAX_SIDE:
                opened.draft("RGB", _fit(width, height))  # a JPEG decodes at 1/2..1/8 scale directly
            opened.load()
            decoded = opened.size  # the draft size, if a JPEG was decoded reduced
            img = ImageOps.exif_transpose(opened)
            if img.size != decoded:  # turned by a quarter: the input's axes swap too
                width, height = height, width
    except BadRequest:
        raise
    except Image.DecompressionBombError as exc:
        raise BadRequest(
            f"{what} declares more than {MAX_IMAGE_PIXELS:,} pixels: scan or export it at a lower resolution"
        ) from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombWarning) as exc:
        # OSError: truncated or corrupt data; SyntaxError/ValueError: malformed chunks in the header.
        name = kind.split("/")[1].upper()
        raise BadRequest(f"{what} is not a readable {name}: {type(exc).__name__}") from exc
    if img.mode not in ("RGB", "L"):
        img = _on_white(img)
    return PageImage(image=_reduced(img, width, height), width=width, height=height, dpi=None)


def render_pdf_page(data: bytes, page: int, dpi: int) -> PageImage:
    """Render page ``page`` (1-based) of a PDF at ``dpi``, lowered so the long side fits ``MAX_SIDE``."""
    with _PDFIUM_LOCK:
        try:
            pdf = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            raise _pdf_error(exc) from exc
        try:
            count = len(pdf)
            if not 1 <= page <= count:
                raise BadRequest(f"page {page} is out of range: the PDF has {count} page(s)")
            pdf_page = pdf[page - 1]
            try:
                w_pt, h_pt = pdf_page.get_size()
                if not (w_pt > 0 and h_pt > 0 and math.isfinite(w_pt * h_pt)):
                    raise BadRequest(f"page {page} of the PDF has no area ({w_pt}x{h_pt} points)")
                scale = min(dpi / 72.0, MAX_SIDE / max(w_pt, h_pt))
                bitmap = pdf_page.render(scale=scale)
                try:
                    image = bitmap.to_pil()  # BGR -> RGB: a copy, independent of the bitmap
                finally:
                    bitmap.close()
            except pdfium.PdfiumError as exc:
                raise BadRequest(f"page {page} of the PDF cannot be rendered; re-export it") from exc
            finally:
                pdf_page.close()
        finally:
            pdf.close()
    if min(image.size) < 1:
        raise BadRequest(f"page {page} of the PDF renders to an empty image")
    return PageImage(
        image=image,
        width=image.width,
        height=image.height,
        dpi=round(scale * 72.0, 1),
        page_count=count,
    )


def _pdf_error(exc: pdfium.PdfiumError) -> BadRequest:
    code = getattr(exc, "err_code", None)
    if code == pdfium_c.FPDF_ERR_PASSWORD:
        return BadRequest("PDF is encrypted with a password; decrypt it first (e.g. qpdf --decrypt)")
    if code == pdfium_c.FPDF_ERR_SECURITY:
        return BadRequest(
            "PDF is encrypted with a security handler this reader does not support; "
            "decrypt it first (e.g. qpdf --decrypt)"
        )
    return BadRequest("not a readable PDF: PDFium cannot load it; re-export or repair it")


def _on_white(img: Image.Image) -> Image.Image:
    """``img`` as RGB, transparent parts white (as a page is), not black."""
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA"):
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return img.convert("RGB")


def _fit(width: int, height: int) -> tuple[int, int]:
    ratio = MAX_SIDE / max(width, height)
    return max(1, round(width * ratio)), max(1, round(height * ratio))


def _reduced(img: Image.Image, width: int, height: int) -> Image.Image:
    """``img`` (decoded at full or draft size) at most ``MAX_SIDE`` on its long side."""
    target = _fit(width, height) if max(width, height) > MAX_SIDE else (width, height)
    if min(target) < MIN_SIDE:
        raise BadRequest(f"image is {width}x{height} pixels: too small to hold a line of text")
    if img.size != target:
        img = img.resize(target, Image.Resampling.LANCZOS)
    return img

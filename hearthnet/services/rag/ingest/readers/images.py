"""Photos and scans of letters (JPEG, PNG, TIFF, HEIC): a page whose text ``ocr.page`` reads off
its image.  Here the image is only checked (Pillow, HEIC by pillow-heif): it opens, its size is
within :data:`hearthnet.contracts.ocr.MAX_IMAGE_PIXELS`; the ingest has the stored image read
by OCR like a scanned PDF page.  Without an ``ocr.page`` provider on the mesh it is refused.
"""

from __future__ import annotations

import io
import warnings

import pillow_heif
from PIL import Image, UnidentifiedImageError

from hearthnet.contracts import formats
from hearthnet.contracts.ocr import MAX_IMAGE_PIXELS
from hearthnet.errors import BadRequest
from hearthnet.services.rag.ingest.read import DocumentHeader, PageText, title_hint
from hearthnet.services.rag.ingest.readers.common import Parts, stem
from hearthnet.services.rag.ingest.sniff import sniff

__all__ = ["image"]

pillow_heif.register_heif_opener()


def image(data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool) -> Parts:
    fmt = next(f for f in formats.FORMATS if f.image and _is(f, data))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as opened:
                width, height = opened.size
                if width * height > MAX_IMAGE_PIXELS:
                    raise BadRequest(
                        f"image is {width}x{height} pixels, over the {MAX_IMAGE_PIXELS:,} pixel limit: "
                        "scan or export it at a lower resolution"
                    )
                opened.load()
    except BadRequest:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise BadRequest(f"image declares more than {MAX_IMAGE_PIXELS:,} pixels: export it smaller") from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError) as exc:
        raise BadRequest(f"not a readable {fmt.label} image: {type(exc).__name__}; re-save it") from exc
    if not scans_ok:
        raise BadRequest(
            f"a {fmt.label} image is read by OCR, and no node of the mesh offers ocr.page: "
            "start a node with OCR, or ingest a PDF with a text layer"
        )
    yield DocumentHeader(fmt.content_type, title_hint(stem(filename_hint)), 1)
    yield PageText(page=1, text="", scanned=True)


def _is(fmt: formats.Format, data: bytes) -> bool:
    return sniff(data, "") == fmt.content_type

"""The ``ocr.page@1.0`` contract: the text lines of one page image or one page of a stored document.

Input ``{image: PNG or JPEG bytes}`` or ``{doc_cid, page = 1}`` (a PDF, PNG or JPEG blob; a blob
not held by the provider is fetched through ``file.fetch`` first); output ``{text, lines:
[{text, box, confidence}]}``, ``box`` four ``[x, y]`` corners in pixels of the image as given
(of the page as rendered at ``meta.dpi`` for a PDF); meta ``{ms, engine, dpi, width, height,
page?, page_count?}``.  :class:`OcrClient` is what a caller (the RAG service's ingest) reads a
stored page's text through.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hearthnet.blobs.cid import is_cid
from hearthnet.contracts.base import Caller, check_input_keys
from hearthnet.errors import BadRequest, InternalError

__all__ = [
    "CAPABILITY",
    "MAX_IMAGE_BYTES",
    "MAX_IMAGE_PIXELS",
    "MAX_TEXT_CHARS",
    "VERSION",
    "BlobPage",
    "ImagePage",
    "OcrClient",
    "parse_ocr_input",
]

CAPABILITY = "ocr.page"
VERSION = (1, 0)
MAX_IMAGE_BYTES = 960 * 1024
"""Bytes of an inline ``image``: the request must fit one 1 MiB peer frame.  A larger image goes
into the blob store first (``hearthnet file put``) and is sent as ``{doc_cid}``."""
MAX_IMAGE_PIXELS = 50_000_000
"""Pixels an input image may declare (a 600 dpi scan of A3 is ~35 M); more is refused before
it is decoded, so a small file that claims a huge canvas allocates nothing."""
MAX_TEXT_CHARS = 256 << 10
"""Characters of ``text`` a caller accepts for one page (as much as a PDF page's text layer may give)."""
_ALLOWED = {"image", "doc_cid", "page"}


@dataclass(frozen=True)
class ImagePage:
    data: bytes


@dataclass(frozen=True)
class BlobPage:
    doc_cid: str
    page: int


def parse_ocr_input(inp: Mapping[str, Any]) -> ImagePage | BlobPage:
    """``{image}`` or ``{doc_cid, page?}``, or ``BadRequest`` saying what is wrong."""
    if not isinstance(inp, Mapping):
        raise BadRequest("input must be a map {image} or {doc_cid, page}")
    check_input_keys(inp, _ALLOWED, CAPABILITY)
    image, doc_cid = inp.get("image"), inp.get("doc_cid")
    if (image is None) == (doc_cid is None):
        raise BadRequest("input needs exactly one of image (PNG or JPEG bytes) or doc_cid (with page)")
    if image is not None:
        if not isinstance(image, bytes | bytearray):
            raise BadRequest(f"input.image must be bytes (a PNG or JPEG file), not {type(image).__name__}")
        if "page" in inp:
            raise BadRequest("input.page goes with doc_cid; an image is one page")
        if not image:
            raise BadRequest("input.image is empty (0 bytes)")
        if len(image) > MAX_IMAGE_BYTES:
            raise BadRequest(
                f"input.image is {len(image):,} bytes, over the {MAX_IMAGE_BYTES:,} that fit one call: "
                "store it first (hearthnet file put) and send {doc_cid}"
            )
        return ImagePage(bytes(image))
    if not is_cid(doc_cid):
        raise BadRequest("input.doc_cid must be a blob id (blake3:<64 hex digits>)")
    page = inp.get("page", 1)
    if not isinstance(page, int) or isinstance(page, bool) or page < 1:
        raise BadRequest(f"input.page must be a page number from 1, got {page!r:.40}")
    return BlobPage(str(doc_cid), page)


class OcrClient:
    """``ocr.page`` as its callers use it: the text of one page of a stored document."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller

    async def page_text(self, doc_cid: str, page: int, *, provider: str | None, timeout: float) -> str:
        """The text ``provider`` (``None``: the bus chooses, this node first) reads off page ``page``
        of ``doc_cid``; ``internal_error`` if it answers anything but a bounded string."""
        result = await self._caller.call(
            CAPABILITY, input={"doc_cid": doc_cid, "page": page}, provider=provider, timeout=timeout
        )
        text = result.output.get("text") if isinstance(result.output, Mapping) else None
        if not isinstance(text, str) or len(text) > MAX_TEXT_CHARS:
            raise InternalError(
                f"{CAPABILITY} answered no usable text for page {page} of {doc_cid} "
                f"(provider {result.provider or 'unknown'})"
            )
        return text

"""What a file is, by its bytes, for the formats of the registry besides PDF and text.

Zipped formats (DOCX, PPTX, XLSX, the OpenDocument ones, EPUB) by what their container holds,
images by their magic bytes, CSV, HTML, e-mail and mailboxes by their file name (an HTML page
also by its start).  A file its name says is of a format but whose bytes are not gets that
format's "not a readable ..." refusal; an encrypted Office file (an OLE container named .docx)
its "encrypted" one.
"""

from __future__ import annotations

import io
import zipfile

from hearthnet.contracts import formats
from hearthnet.contracts.formats import Format
from hearthnet.errors import BadRequest

__all__ = ["sniff"]

_ZIP = b"PK\x03\x04"
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_TIFF = (b"II*\x00", b"MM\x00*")
_HEIF_BRANDS = frozenset({b"heic", b"heix", b"hevc", b"heim", b"heis", b"hevm", b"hevs", b"mif1", b"msf1"})
_ZIPPED = (formats.DOCX, formats.PPTX, formats.XLSX, formats.ODT, formats.ODP, formats.ODS, formats.EPUB)
_OOXML_PARTS = (
    ("word/document.xml", formats.DOCX),
    ("ppt/presentation.xml", formats.PPTX),
    ("xl/workbook.xml", formats.XLSX),
)
_BY_NAME = (formats.CSV, formats.HTML, formats.EML, formats.MBOX)
_BINARY = (*_ZIPPED, formats.JPEG, formats.PNG, formats.TIFF, formats.HEIC)


def sniff(data: bytes, suffix: str) -> str | None:
    """The content type of ``data`` if it is one of these formats, else ``None``; refusals as above."""
    named = formats.by_suffix("x" + suffix) if suffix else None
    if data.startswith(_ZIP):
        return _zipped(data, named).content_type
    if data.startswith(_OLE):
        if named in (formats.DOCX, formats.PPTX, formats.XLSX):
            raise BadRequest(
                f"{named.label} file is encrypted with a password (or is an old binary Office file "
                "renamed); save it without a password first"
            )
        raise BadRequest(
            "unsupported type application/x-ole (an old binary Office file: doc, xls, ppt): save it as "
            f"docx, xlsx, pptx or OpenDocument; supported are {formats.supported_text()}"
        )
    image = _image(data)
    if image is not None:
        return image.content_type
    if named in _BY_NAME:
        return named.content_type
    head = data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return formats.HTML.content_type
    if named in _BINARY:
        raise BadRequest(f"not a readable {named.label} file: its bytes are not one; re-save or re-export it")
    return None


def _image(data: bytes) -> Format | None:
    for fmt in (formats.JPEG, formats.PNG):
        if fmt.magic is not None and data.startswith(fmt.magic):
            return fmt
    if data.startswith(_TIFF):
        return formats.TIFF
    if data[4:8] == b"ftyp" and data[8:12] in _HEIF_BRANDS:
        return formats.HEIC
    return None


def _zipped(data: bytes, named: Format | None) -> Format:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            mimetype = archive.read("mimetype")[:100].strip() if "mimetype" in names else b""
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, RuntimeError) as exc:
        if named in _ZIPPED:
            raise BadRequest(
                f"not a readable {named.label} file: {type(exc).__name__}; re-save or re-export it"
            ) from exc
        raise BadRequest(f"not a readable zip file: {type(exc).__name__}") from exc
    for fmt in _ZIPPED:
        if mimetype and mimetype.decode("ascii", "replace") == fmt.content_type:
            return fmt
    if "[Content_Types].xml" in names:
        for part, fmt in _OOXML_PARTS:
            if part in names:
                return fmt
    if named in _ZIPPED:
        raise BadRequest(
            f"not a readable {named.label} file: its container lacks the parts of one; re-save it"
        )
    raise BadRequest(f"unsupported type application/zip: supported are {formats.supported_text()}")

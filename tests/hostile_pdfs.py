"""Hostile PDFs built in the test that needs them (issue 29): small files that make a reader work
or log without end.  Each is a few lines of raw PDF objects with a correct xref."""

from __future__ import annotations

import zlib

__all__ = ["TEXT_SHOWN", "content_bomb", "nested_resources", "pdf_of"]

TEXT_SHOWN = b"BT /F1 12 Tf 72 712 Td (a line of text) Tj ET\n"
"""A content stream's head that shows text (pypdf parses a stream only if it may show text)."""


def pdf_of(objects: list[bytes]) -> bytes:
    """A PDF of ``objects`` (object 1 the catalog), numbered from 1, with its xref and trailer."""
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def content_bomb(
    pages: int = 60, inflated: int = 20 << 20, unit: bytes = b"BT /F1 1 Tf ET\n", head: bytes = b""
) -> bytes:
    """``pages`` pages sharing one FlateDecode content stream of ``inflated`` bytes of ``unit``
    repeated after ``head`` (issue 29: 60 pages, 20 MiB of ``BT /F1 1 Tf ET``, a 50 KB file)."""
    stream = zlib.compress(head + unit * ((inflated - len(head)) // len(unit)), 9)
    kids = b" ".join(b"%d 0 R" % (5 + i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for _ in range(pages):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
            b"/Resources << /Font << /F1 4 0 R >> >> >>"
        )
    return pdf_of(objects)


def nested_resources(depth: int = 50_000, text: bytes = b"a page of text") -> bytes:
    """One page whose ``/Resources`` nest ``depth`` dictionaries deep (issue 29: 50,000 deep made
    pypdf warn 14,861 times); its content stream draws ``text``."""
    content = b"BT /F1 12 Tf 72 712 Td (%s) Tj ET" % text
    nested = b"<< /X " * depth + b"<< >>" + b" >>" * depth
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> /XObject " + nested + b" >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    return pdf_of(objects)

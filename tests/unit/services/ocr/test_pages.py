"""Bytes to one bounded page image: real PDFs rendered with PDFium, real PNG/JPEG files decoded."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from hearthnet.errors import BadRequest
from hearthnet.services.ocr.pages import MAX_SIDE, kind_of, open_image, render_pdf_page
from tests.shared_data import PDF_DIR

SCANNED = PDF_DIR / "scanned_image_only_no_text.pdf"
VICKSBURG = PDF_DIR / "scanned_with_ocr_text_layer.pdf"

# Page 1 of every shared PDF: rendered, or a bad_request naming what is wrong (never anything else).
EXPECTED = {
    "corrupt_header_only.pdf": "not a readable PDF",
    "malformed_broken_page_tree.pdf": "not a readable PDF",
    "empty_zero_bytes.pdf": "not a readable PDF",
    "encrypted_password_openpassword.pdf": "encrypted with a password",
}


def png_header(width: int, height: int) -> bytes:
    """A PNG that declares ``width`` x ``height`` pixels and holds one row of data (a bomb's header)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 9))
        + chunk(b"IEND", b"")
    )


def encoded(image: Image.Image, fmt: str, **kw: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **kw)
    return out.getvalue()


@pytest.mark.parametrize("path", sorted(PDF_DIR.glob("*.pdf")), ids=lambda p: p.name)
def test_every_shared_pdf_renders_or_is_a_clear_bad_request(path: Path) -> None:
    data = path.read_bytes()
    expected = EXPECTED.get(path.name, "ok")
    if expected != "ok":
        with pytest.raises(BadRequest, match=expected):
            render_pdf_page(data, 1, 200)
        return
    page = render_pdf_page(data, 1, 200)
    assert page.image.mode == "RGB" and page.page_count is not None and page.page_count >= 1
    assert max(page.image.size) <= MAX_SIDE
    assert (page.width, page.height) == page.image.size and page.scale == 1.0


def test_a_pdf_page_renders_at_the_asked_dpi_within_the_side_bound() -> None:
    scanned = render_pdf_page(SCANNED.read_bytes(), 1, 200)  # 384 x 471 points
    assert scanned.image.size == (1067, 1309) and scanned.dpi == 200.0
    # A 6 x 9 inch page at 300 dpi would be 2700 pixels high: rendered at 2000, its dpi says so.
    tall = render_pdf_page(VICKSBURG.read_bytes(), 6, 300)
    assert tall.image.height == 2000 and abs(tall.image.width - 1333) <= 1
    assert tall.dpi == pytest.approx(222.2, abs=0.1)
    assert tall.page_count == 6


@pytest.mark.parametrize(("page", "fragment"), [(0, "page 0 is out of range"), (7, "the PDF has 6 page")])
def test_a_page_out_of_range_names_the_page_count(page: int, fragment: str) -> None:
    with pytest.raises(BadRequest, match=fragment):
        render_pdf_page(VICKSBURG.read_bytes(), page, 200)


def test_an_image_is_decoded_and_reduced_to_the_side_bound_with_its_own_size_kept() -> None:
    big = Image.new("RGB", (4000, 3000), "white")
    for fmt in ("PNG", "JPEG"):
        page = open_image(encoded(big, fmt))
        assert (page.width, page.height) == (4000, 3000) and page.dpi is None
        assert page.image.size == (2000, 1500) and page.scale == pytest.approx(2.0)


def test_exif_orientation_is_applied_and_the_size_follows_it() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown turned a quarter clockwise
    data = encoded(Image.new("RGB", (300, 100), "white"), "JPEG", exif=exif.tobytes())
    page = open_image(data)
    assert (page.width, page.height) == (100, 300) and page.image.size == (100, 300)


def test_transparent_pixels_become_white_not_black() -> None:
    clear = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    page = open_image(encoded(clear, "PNG"))
    assert page.image.mode == "RGB" and page.image.getpixel((10, 10)) == (255, 255, 255)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"just some text", "neither PNG nor JPEG"),
        (b"GIF89a" + b"\x00" * 32, "neither PNG nor JPEG"),
        (b"%PDF-1.7\n" + b"\x00" * 32, "a PDF"),
        (png_header(100_000, 100_000), "pixel"),
        (png_header(20_000, 3_000), "50,000,000 pixel limit"),
        (encoded(Image.new("L", (3, 5000), 255), "PNG"), "3x5000 pixels: too small to hold a line of text"),
    ],
    ids=["text", "gif", "pdf", "bomb", "over-limit", "thin"],
)
def test_what_is_not_a_usable_image_is_a_bad_request_naming_why(data: bytes, fragment: str) -> None:
    with pytest.raises(BadRequest, match=fragment):
        open_image(data)


def test_a_damaged_image_is_a_bad_request_whatever_the_damage() -> None:
    page = Image.effect_noise((400, 300), 64)  # incompressible: half the file is half the pixels
    for fmt, name in (("PNG", "PNG"), ("JPEG", "JPEG")):
        data = encoded(page, fmt)
        for cut in (12, 40, len(data) // 2):
            with pytest.raises(BadRequest, match=f"not a readable {name}"):
                open_image(data[:cut])
        for at in range(16, len(data), max(1, len(data) // 40)):  # flipped bytes: decoded or refused
            flipped = bytearray(data)
            flipped[at] ^= 0xFF
            try:
                open_image(bytes(flipped))
            except BadRequest:
                pass


def test_kind_by_magic_bytes() -> None:
    assert kind_of(b"\x89PNG\r\n\x1a\n....") == "image/png"
    assert kind_of(b"\xff\xd8\xff\xe0") == "image/jpeg"
    assert kind_of(b"junk%PDF-1.4") == "application/pdf"
    assert kind_of(b"hello") is None

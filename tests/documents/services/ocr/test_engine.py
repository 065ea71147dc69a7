"""The real OCR engine (RapidOCR, PP-OCRv6 small) on real scanned pages, and with no network at all."""

from __future__ import annotations

import json
import subprocess
import sys

from hearthnet.services.ocr.engine import OcrEngine, Recognition
from hearthnet.services.ocr.pages import render_pdf_page
from tests.shared_data import PDF_DIR

SCANNED = PDF_DIR / "scanned_image_only_no_text.pdf"
VICKSBURG = PDF_DIR / "scanned_with_ocr_text_layer.pdf"

# Words read off the pages rendered to PNG (Huckleberry Finn p. 22; The Siege of Vicksburg p. 50).
SCANNED_WORDS = ["tip-toeing", "widow's garden", "Miss Watson", "kitchen door", "THEY TIP-TOED ALONG"]
VICKSBURG_P2_WORDS = ["THE SIEGE OF VICKSBURG", "Sibley Tent", "96th Ohio", "thirteen dollars", "magnanimous"]


def recognise(engine: OcrEngine, path: object, page: int) -> Recognition:
    assert hasattr(path, "read_bytes")
    return engine.recognise(render_pdf_page(path.read_bytes(), page, 200).image)


def test_the_scanned_page_without_a_text_layer_is_read(engine: OcrEngine) -> None:
    found = recognise(engine, SCANNED, 1)
    for words in SCANNED_WORDS:
        assert words in found.text, words
    assert (found.width, found.height) == (1067, 1309)
    # reading order: the chapter's first line comes before the page's last one
    assert found.text.index("WE went tip-toeing") < found.text.index("if you are anywheres")
    for line in found.lines:
        assert line.text and "\n" not in line.text and 0.5 <= line.confidence <= 1.0
        for x, y in line.box:
            assert -2 <= x <= found.width + 2 and -2 <= y <= found.height + 2
    # the caption sits under the picture, left of the text column
    caption = next(line for line in found.lines if "TIP-TOED" in line.text)
    assert max(x for x, _ in caption.box) < found.width / 2 < caption.box[0][1]


def test_a_page_of_a_scan_with_a_text_layer_is_read_from_its_image(engine: OcrEngine) -> None:
    found = recognise(engine, VICKSBURG, 2)
    for words in VICKSBURG_P2_WORDS:
        assert words in found.text, words
    assert sum(line.confidence for line in found.lines) / len(found.lines) > 0.95


def test_a_blank_page_has_no_lines(engine: OcrEngine) -> None:
    from PIL import Image

    found = engine.recognise(Image.new("RGB", (800, 1000), "white"))
    assert found.lines == [] and found.text == ""


OFFLINE = r"""
import json, socket, sys
attempts = []
def refuse(*args, **kwargs):
    attempts.append(repr(args[1:] if args else kwargs)[:80])
    raise OSError("network unreachable (test)")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from hearthnet.services.ocr.engine import OcrEngine
from hearthnet.services.ocr.pages import render_pdf_page
engine = OcrEngine()
engine.load()
page = render_pdf_page(open(sys.argv[1], "rb").read(), 1, 200)
found = engine.recognise(page.image)
print(json.dumps({"attempts": attempts, "text": found.text}))
"""


def test_the_engine_loads_and_reads_with_every_network_call_refused() -> None:
    """The models come from the installed wheel: nothing is fetched from a model hub, ever."""
    proc = subprocess.run(
        [sys.executable, "-c", OFFLINE, str(SCANNED)],
        capture_output=True,
        text=True,
        timeout=240,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": "/nonexistent"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["attempts"] == []
    assert "Miss Watson" in out["text"]

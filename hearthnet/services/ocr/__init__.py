"""The OCR service: ``ocr.page@1.0`` over an in-process RapidOCR engine (models inside its wheel).

Callers outside this package use only the names exported here.
"""

from hearthnet.contracts.ocr import CAPABILITY, MAX_IMAGE_BYTES, parse_ocr_input
from hearthnet.services.ocr.engine import Line, OcrEngine, OcrUnavailable, Recognition
from hearthnet.services.ocr.service import OcrService, OcrSettings

__all__ = [
    "CAPABILITY",
    "MAX_IMAGE_BYTES",
    "Line",
    "OcrEngine",
    "OcrService",
    "OcrSettings",
    "OcrUnavailable",
    "Recognition",
    "parse_ocr_input",
]

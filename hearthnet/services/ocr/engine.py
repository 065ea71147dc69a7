"""RapidOCR (PP-OCRv6 small, ONNX) in-process: the models ship inside the ``rapidocr`` wheel.

:class:`OcrEngine` is blocking and only ever called from worker threads.  It
loads the three ONNX sessions (detection, orientation, recognition) on its
first page, from files named explicitly inside the installed package, so
RapidOCR's own download path (a model hub, by URL) is never taken: OCR works
with no network at all.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

__all__ = ["MODEL_FILES", "Line", "OcrEngine", "OcrUnavailable", "Recognition", "find_model_files"]

MODEL_FILES: dict[str, str] = {
    "Det": "PP-OCRv6_det_small.onnx",
    "Cls": "ch_ppocr_mobile_v2.0_cls_mobile.onnx",
    "Rec": "PP-OCRv6_rec_small.onnx",
}
"""The model files ``rapidocr`` 3.10 ships in ``rapidocr/models/`` (its defaults)."""
MODEL_NAME = "PP-OCRv6-small"


class OcrUnavailable(Exception):
    """The OCR package or its bundled model files are missing; the message says how to fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Line:
    """One recognised line: its text, its quadrilateral in image pixels, the recogniser's confidence."""

    text: str
    box: tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]
    """Corners clockwise from the top left of the text as written (rotated text gives a rotated box)."""
    confidence: float


@dataclass(frozen=True)
class Recognition:
    lines: list[Line]
    width: int
    height: int

    @property
    def text(self) -> str:
        """The lines in the engine's reading order (top to bottom, then left to right), one a line."""
        return "\n".join(line.text for line in self.lines)


def find_model_files() -> dict[str, Path]:
    """The bundled model file of each stage, or :class:`OcrUnavailable` naming what is missing."""
    spec = importlib.util.find_spec("rapidocr")
    if spec is None or spec.origin is None:
        raise OcrUnavailable("the OCR package rapidocr is not installed: pip install 'rapidocr==3.10.0'")
    models = Path(spec.origin).parent / "models"
    files = {stage: models / name for stage, name in MODEL_FILES.items()}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise OcrUnavailable(
            f"OCR model files missing from the rapidocr package ({', '.join(missing)}): "
            "reinstall it (pip install --force-reinstall 'rapidocr==3.10.0')"
        )
    return files


def engine_label() -> str:
    """``rapidocr-<version>/<model>``: what the descriptor and every answer name as the engine."""
    try:
        version = importlib.metadata.version("rapidocr")
    except importlib.metadata.PackageNotFoundError:
        version = "missing"
    return f"rapidocr-{version}/{MODEL_NAME}"


class OcrEngine:
    """Recognises the text lines of one page image at a time (thread-safe, loaded on first use)."""

    def __init__(self) -> None:
        self._ocr: Any = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._ocr is not None

    def load(self) -> None:
        """Build the RapidOCR pipeline from the bundled files (idempotent)."""
        with self._lock:
            if self._ocr is not None:
                return
            files = find_model_files()
            from rapidocr import RapidOCR  # heavy (OpenCV, omegaconf): only where OCR runs

            # RapidOCR logs to stderr through its own handler; keep it to errors (they name
            # files and stages, never text).
            logging.getLogger("RapidOCR").setLevel(logging.ERROR)
            params: dict[str, Any] = {"Global.log_level": "error"}
            for stage, path in files.items():
                params[f"{stage}.model_path"] = str(path)
            ocr: Any = RapidOCR(params=params)
            # RapidOCR builds its sessions on its first page; build them now (rapidocr 3.10's own
            # loaders), so that a broken model fails the load and the first page is not the slowest.
            for loader in ("_load_det_model", "_load_cls_model", "_load_rec_model"):
                build = getattr(ocr, loader, None)
                if build is not None:
                    build()
            self._ocr = ocr

    def unload(self) -> None:
        with self._lock:
            self._ocr = None

    def recognise(self, image: Image.Image) -> Recognition:
        """The text lines of ``image`` (any mode; converted to RGB), boxes in its pixels."""
        self.load()
        rgb = image if image.mode == "RGB" else image.convert("RGB")
        # RapidOCR treats a PIL image as RGB and converts it to the BGR its models expect.
        result = self._ocr(rgb)
        del rgb
        txts = getattr(result, "txts", None) or ()
        boxes = getattr(result, "boxes", None)
        scores = getattr(result, "scores", None) or ()
        lines: list[Line] = []
        if boxes is not None:
            for text, box, score in zip(txts, boxes, scores, strict=False):
                clean = str(text).strip()
                if clean:
                    lines.append(Line(clean, _corners(box), round(float(score), 4)))
        return Recognition(lines=lines, width=image.width, height=image.height)


def _corners(box: Any) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]:
    points = np.asarray(box, dtype=np.float64).reshape(4, 2).round().astype(int).tolist()
    a, b, c, d = (tuple(p) for p in points)
    return (a[0], a[1]), (b[0], b[1]), (c[0], c[1]), (d[0], d[1])

"""Where the shared third-party test data lives: ``../shared/data`` beside the repository.

``HEARTHNET_SHARED_DATA`` overrides it. A missing directory is an error, not a
skip: tests that need real PDFs must not pass vacuously.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("HEARTHNET_SHARED_DATA", ROOT.parent / "shared" / "data"))
PDF_DIR = SHARED_DATA / "pdfs"
SCIFACT_DIR = SHARED_DATA / "scifact"

if not PDF_DIR.is_dir():
    raise RuntimeError(
        f"shared test data not found at {SHARED_DATA}: clone the repository beside shared/ "
        "or set HEARTHNET_SHARED_DATA"
    )

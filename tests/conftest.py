"""Fixtures for the whole suite: structlog's defaults for each test, anyio on asyncio (a module
that runs on more event loops gives its own ``anyio_backend``), and one MiniLM model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import structlog
from hypothesis import settings

# Hypothesis' default 200 ms deadline per example is a fixed timeout: on a shared 2-core machine an
# example that takes 0.2 ms alone took 257 ms once and failed the run. Examples are bounded by the
# strategies; a test that needs a bound on time says so itself.
settings.register_profile("hearthnet", deadline=None)
settings.load_profile("hearthnet")

if TYPE_CHECKING:
    from hearthnet.services.embedding.onnx_backend import OnnxModel
    from hearthnet.services.ocr.engine import OcrEngine


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """Each test starts from structlog's defaults (every level kept), whatever an imported module
    configured: ``bench.common`` sets warning at import, which made log-hygiene tests that look for
    an info event see nothing when the suite ran as a whole."""
    old = structlog.get_config()
    structlog.reset_defaults()
    try:
        yield
    finally:
        structlog.configure(**old)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def minilm() -> OnnxModel:
    """The real all-MiniLM-L6-v2 ONNX model (loaded once for the run)."""
    from hearthnet.services.embedding import OnnxSettings, find_model_files
    from hearthnet.services.embedding.onnx_backend import OnnxModel

    return OnnxModel(find_model_files(), OnnxSettings())


@pytest.fixture(scope="module")
def engine() -> Iterator[OcrEngine]:
    """The real OCR engine, one per test module (unloaded when the module is done)."""
    from hearthnet.services.ocr.engine import OcrEngine

    e = OcrEngine()
    yield e
    e.unload()

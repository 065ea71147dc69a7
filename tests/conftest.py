"""Fixtures for the whole suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog


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

"""The watcher's view of its corpus after a restart: a corpus no node is known to host is "cannot
tell", never "holds nothing" (which would ingest every indexed file again, into a second copy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hearthnet.services.rag.folders.apply import CorpusWriter
from tests.unit.services.rag.test_service import node

pytestmark = pytest.mark.anyio


async def test_a_corpus_no_node_is_known_to_host_is_not_taken_as_empty(tmp_path: Path) -> None:
    async with node(tmp_path) as n:  # no catalog knows of "family": whoever answers would say "none"
        assert await CorpusWriter(n.bus, "family").held() is None

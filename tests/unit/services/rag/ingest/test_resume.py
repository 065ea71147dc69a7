"""An interrupted ingest resumes (issue 33): the vectors of each embedding call are kept beside the
ledger as they come, the next ingest of the same text embeds only what was not kept, and a
document's kept vectors go once it is written.

The real model on a real node's bus (``test_service``'s ``node``); the interruption is an
embedding call that fails midway, as a kill would leave it: some calls done, the rest never.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import numpy as np
import pytest

from hearthnet.errors import Partition
from hearthnet.services.embedding.onnx_backend import OnnxModel
from hearthnet.services.rag.chunks import Chunk
from hearthnet.services.rag.ingest.embed import PAGES_AHEAD, embed_streamed
from hearthnet.services.rag.store.kept import KeptVectors
from tests.unit.services.rag.test_service import RecordingEmbedder, node

DOC = "blake3:" + "ab" * 32


def _chunks(n: int) -> list[Chunk]:
    return [Chunk(f"c{i}", f"chunk {i} about compost and {i % 7} worms", {"doc_cid": DOC}) for i in range(n)]


async def _embed(embedder: RecordingEmbedder, chunks: list[Chunk], kept: KeptVectors) -> np.ndarray:
    send, receive = anyio.create_memory_object_stream[list[Chunk]](PAGES_AHEAD)
    for start in range(0, len(chunks), 16):  # pages of 16 chunks, all read before the first call
        await send.send(chunks[start : start + 16])
    await send.aclose()
    async with receive:
        with anyio.fail_after(120):
            return (await embed_streamed(embedder, receive, None, in_flight=1, kept=kept)).vectors


@pytest.mark.anyio
async def test_an_ingest_cut_midway_resumes_from_the_vectors_it_kept(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    chunks = _chunks(80)  # calls of 32, 32, 16
    kept = KeptVectors(tmp_path / "kept.sqlite3")
    try:
        async with node(tmp_path / "n", minilm=minilm) as n:
            cut = RecordingEmbedder(n.bus)
            cut.fail.add(2)  # the third call never comes back: 64 of 80 embedded (80 %)
            with pytest.raises(Partition):
                await _embed(cut, chunks, kept)
            assert cut.sizes == [32, 32, 16] and kept.count(DOC) == 64

            again = RecordingEmbedder(n.bus)
            resumed = await _embed(again, chunks, kept)
            assert sum(again.sizes) == 16  # only the rest is embedded

            whole = RecordingEmbedder(n.bus)
            uninterrupted = await _embed(whole, chunks, KeptVectors(tmp_path / "other.sqlite3"))
            assert sum(whole.sizes) == 80
        assert resumed.shape == uninterrupted.shape == (80, 384)
        assert np.allclose(resumed, uninterrupted, atol=1e-5)  # the same vectors, in the same order
        kept.drop([DOC])
        assert kept.count(DOC) == 0
    finally:
        kept.close()

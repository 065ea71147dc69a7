"""Questions stay fast while the node ingests (issue 33): an ingest's chunks (``bulk``) run in their
own lane, on worker threads of lower CPU priority, and never share a batch with a question.

The real model; its ``run`` is wrapped only to record, per batch, the rows' lengths and the
nice value of the thread that ran it (then the real inference runs).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import anyio
import numpy as np
import pytest

from hearthnet.services.embedding import OnnxEmbeddingBackend, OnnxSettings, find_model_files
from hearthnet.services.embedding.onnx_backend import BULK_NICE, Encoded, OnnxModel


@pytest.fixture(scope="module")
def model() -> Iterator[OnnxModel]:
    yield OnnxModel(find_model_files(), OnnxSettings())


CHUNK = "The pond froze over in the night and the ice sang as it thickened under the snow. " * 14
QUESTIONS = ["When did the pond freeze?", "What did the ice do?", "Where is the cabin?"]


@pytest.mark.anyio
async def test_questions_never_share_a_batch_with_bulk_chunks_and_run_at_normal_priority(
    model: OnnxModel,
) -> None:
    backend = OnnxEmbeddingBackend(model)
    seen: list[tuple[int, int, int]] = []  # (rows, longest row, nice of the running thread)
    lock = threading.Lock()
    real_run = model.run

    def recorded(batch: list[Encoded]) -> np.ndarray:
        nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        with lock:
            seen.append((len(batch), max(e.length for e in batch), nice))
        first_batch.set()
        return real_run(batch)

    model.run = recorded  # type: ignore[method-assign]
    first_batch = threading.Event()
    base = os.getpriority(os.PRIO_PROCESS, 0)
    bulk_started = anyio.Event()
    answers: dict[str, np.ndarray] = {}

    async def ingest() -> None:
        bulk_started.set()
        await backend.embed([CHUNK] * 24, normalize=True, bulk=True)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ingest)
            await bulk_started.wait()
            with anyio.fail_after(120):
                assert await anyio.to_thread.run_sync(first_batch.wait, 120)  # the ingest is running
                for q in QUESTIONS:
                    answers[q] = (await backend.embed([q], normalize=True)).vectors[0]
    finally:
        del model.run  # the module's model again
    short = [(rows, width, nice) for rows, width, nice in seen if width < 32]
    long = [(rows, width, nice) for rows, width, nice in seen if width >= 32]
    assert len(short) >= 1 and len(long) >= 12
    assert all(nice == base for _, _, nice in short), short  # questions: the node's own priority
    assert all(nice >= min(19, base + BULK_NICE) for _, _, nice in long), long  # the ingest yields
    # A question's batch holds questions only: never padded to a 256-token chunk.
    assert all(width < 32 for _, width, _ in short)
    for q in QUESTIONS:  # and its vector is the one it gets alone
        alone = (await backend.embed([q], normalize=True)).vectors[0]
        np.testing.assert_allclose(answers[q], alone, atol=1e-5)
    await backend.aclose()

"""Micro-batching across concurrent callers, with the real model and with a plain row function."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import numpy as np
import pytest

from hearthnet.errors import InternalError
from hearthnet.services.embedding import OnnxEmbeddingBackend, OnnxSettings, find_model_files
from hearthnet.services.embedding.batcher import MicroBatcher, _Request, plan_batch
from hearthnet.services.embedding.onnx_backend import OnnxModel
from tests.polling import wait_until


@pytest.fixture(scope="module")
def model() -> Iterator[OnnxModel]:
    yield OnnxModel(find_model_files(), OnnxSettings())


TEXTS = [
    f"Note {i}: the {'pump' if i % 2 else 'panel'} at site {i} needs {'new seals ' * (i % 7)}checking."
    for i in range(32)
]


@pytest.mark.anyio
async def test_32_concurrent_callers_get_their_own_vectors(model: OnnxModel) -> None:
    backend = OnnxEmbeddingBackend(model)
    alone = {}
    for t in TEXTS:
        alone[t] = (await backend.embed([t], normalize=True)).vectors[0]
    runs_before = backend._batcher.batches_run
    results: dict[int, np.ndarray] = {}

    async def caller(i: int) -> None:
        # Callers 0..15 send one text, the others three in a row (order must be kept).
        texts = [TEXTS[i]] if i < 16 else [TEXTS[i], TEXTS[(i + 1) % 32], TEXTS[(i + 2) % 32]]
        results[i] = (await backend.embed(texts, normalize=True)).vectors

    async with anyio.create_task_group() as tg:
        for i in range(32):
            tg.start_soon(caller, i)
    for i in range(32):
        expected = [TEXTS[i]] if i < 16 else [TEXTS[i], TEXTS[(i + 1) % 32], TEXTS[(i + 2) % 32]]
        assert results[i].shape == (len(expected), 384)
        for row, t in zip(results[i], expected, strict=True):
            np.testing.assert_allclose(row, alone[t], atol=1e-5)
    # 64 texts from 32 callers ran in far fewer than 32 batches.
    assert backend._batcher.batches_run - runs_before < 16


def _rows(items: list[int]) -> np.ndarray:
    return np.array([[float(x), float(x) * 2] for x in items], dtype=np.float32)


@pytest.mark.anyio
async def test_concurrent_small_requests_share_one_batch() -> None:
    entered = threading.Event()
    release = threading.Event()
    sizes: list[int] = []

    def run(items: list[int]) -> np.ndarray:
        sizes.append(len(items))
        entered.set()
        release.wait(10)
        return _rows(items)

    batcher: MicroBatcher[int] = MicroBatcher(
        run, dim=2, limiter=anyio.CapacityLimiter(1), max_batch_items=64, max_batch_tokens=10_000
    )
    out: dict[int, np.ndarray] = {}

    async def one(i: int) -> None:
        out[i] = await batcher.submit([(i, 10)])

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, 0)
        await anyio.to_thread.run_sync(entered.wait, 10)  # batch 1 (caller 0 alone) is running
        for i in range(1, 17):
            tg.start_soon(one, i)
        await anyio.wait_all_tasks_blocked()  # callers 1..16 queued behind it
        release.set()
    assert sizes == [1, 16]
    for i in range(17):
        np.testing.assert_array_equal(out[i], _rows([i]))


def test_plan_batch_round_robin_bounds_a_big_caller() -> None:
    big: _Request[int] = _Request([(i, 250) for i in range(256)], dim=2)
    small: _Request[int] = _Request([(1000, 12)], dim=2)
    pending = deque([big, small])
    first = plan_batch(pending, max_items=32, max_tokens=2048)
    # The small caller rides in the first batch; the big one fills the rest up to the token budget.
    assert (small, 0) in first
    assert len(first) * 250 <= 2048
    assert pending == deque([big])
    batches = 1
    while pending:
        b = plan_batch(pending, max_items=32, max_tokens=2048)
        assert 1 <= len(b) <= 8
        batches += 1
    assert big.next == 256
    assert batches == 33


def test_plan_batch_sorts_each_request_shortest_first_and_runs_oversized_alone() -> None:
    req: _Request[str] = _Request([("long", 300), ("short", 5), ("mid", 50)], dim=2)
    pending = deque([req])
    assert [pos for _, pos in plan_batch(pending, max_items=8, max_tokens=200)] == [1, 2]
    assert [pos for _, pos in plan_batch(pending, max_items=8, max_tokens=200)] == [0]
    assert not pending


@pytest.mark.anyio
async def test_failure_reaches_every_caller_as_internal_error() -> None:
    def run(items: list[int]) -> np.ndarray:
        raise RuntimeError("onnx exploded")

    batcher: MicroBatcher[int] = MicroBatcher(run, dim=2, limiter=anyio.CapacityLimiter(1))
    errors: list[BaseException] = []

    async def one(i: int) -> None:
        try:
            await batcher.submit([(i, 3), (i + 1, 3)])
        except InternalError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(one, i)
    assert len(errors) == 5
    assert all("RuntimeError" in str(e) and "exploded" not in str(e) for e in errors)


@pytest.mark.anyio
async def test_cancelled_caller_leaves_no_pending_work() -> None:
    entered = threading.Event()
    release = threading.Event()

    def run(items: list[int]) -> np.ndarray:
        entered.set()
        release.wait(10)
        return _rows(items)

    batcher: MicroBatcher[int] = MicroBatcher(run, dim=2, limiter=anyio.CapacityLimiter(1), max_batch_items=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(batcher.submit, [(1, 1)])
        await anyio.to_thread.run_sync(entered.wait, 10)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await batcher.submit([(2, 1), (3, 1)])
        assert not batcher._pending
        release.set()
    assert batcher.batches_run == 1


@pytest.mark.anyio
async def test_big_caller_does_not_starve_a_small_one() -> None:
    first_entered = threading.Event()
    release = threading.Event()
    batches: list[list[int]] = []

    def run(items: list[int]) -> np.ndarray:
        batches.append(items)
        first_entered.set()
        release.wait(10)
        return _rows(items)

    batcher: MicroBatcher[int] = MicroBatcher(
        run, dim=2, limiter=anyio.CapacityLimiter(1), max_batch_items=8, max_batch_tokens=10_000
    )
    big_result: list[np.ndarray] = []
    small_result: list[np.ndarray] = []

    async def big() -> None:
        big_result.append(await batcher.submit([(i, 250) for i in range(256)]))

    async def small() -> None:
        small_result.append(await batcher.submit([(9999, 10)]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(big)
        await anyio.to_thread.run_sync(first_entered.wait, 10)
        tg.start_soon(small)
        await anyio.wait_all_tasks_blocked()
        release.set()
    # The big caller's first batch was already running; the small one rides in the very next.
    assert 9999 in batches[1]
    assert all(len(b) <= 8 for b in batches)
    np.testing.assert_array_equal(small_result[0], _rows([9999]))
    np.testing.assert_array_equal(big_result[0], _rows(list(range(256))))


@pytest.mark.anyio
async def test_a_caller_cancelled_before_its_batch_starts_still_runs_the_others_items() -> None:
    """A batch takes every caller's pending items; if the caller whose turn runs it was cancelled
    while its thread waited to start, the others' items were dropped and they timed out."""

    def rows(items: list[float]) -> np.ndarray:
        return np.array([[x] for x in items], dtype=np.float32)

    limiter = anyio.CapacityLimiter(1)
    batcher: MicroBatcher[float] = MicroBatcher(rows, dim=1, limiter=limiter)
    release = threading.Event()
    busy = threading.Event()
    got: dict[str, float] = {}
    entered: list[str] = []

    def hold() -> None:
        busy.set()
        release.wait()

    async def caller(name: str, item: float, scope: anyio.CancelScope) -> None:
        with scope:
            entered.append(name)
            got[name] = float((await batcher.submit([(item, 1)]))[0, 0])

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(batcher._threads.run, hold)  # holds the batcher's only inference thread
            try:
                await wait_until(busy.is_set)
                a, b = anyio.CancelScope(), anyio.CancelScope()
                await limiter.acquire()  # both callers queue their items and wait for a turn
                tg.start_soon(caller, "a", 1.0, a)
                tg.start_soon(caller, "b", 2.0, b)
                await wait_until(lambda: len(entered) == 2 and len(batcher._pending) == 2)
                limiter.release()
                # a's turn (first in line) takes both items into one batch, whose job waits
                # for the busy thread
                await wait_until(lambda: not batcher._pending)
                assert batcher.batches_run == 0
                a.cancel()
                await anyio.lowlevel.checkpoint()
            finally:
                release.set()
            await wait_until(lambda: "b" in got, timeout=10)
    finally:
        release.set()
        batcher.close()
    assert got == {"b": 2.0}


@pytest.mark.anyio
async def test_a_small_call_on_an_idle_model_is_shared_by_every_inference_slot() -> None:
    """Nine texts that fit one batch ran as one batch on one thread while the other idled; now
    they run as 5 + 4 at the same time.  One text, and a model with one slot, are unchanged."""
    both_running = threading.Barrier(2, timeout=10)
    sizes: list[int] = []

    def rows(items: list[int]) -> np.ndarray:
        sizes.append(len(items))
        if len(items) > 1:
            both_running.wait()  # raises if the other half never runs beside this one
        return np.array([[float(x)] for x in items], dtype=np.float32)

    batcher: MicroBatcher[int] = MicroBatcher(rows, dim=1, limiter=anyio.CapacityLimiter(2))
    try:
        with anyio.fail_after(20):
            out = await batcher.submit([(i, 10) for i in range(9)])
            assert out[:, 0].tolist() == [float(i) for i in range(9)]
            assert sorted(sizes) == [4, 5]
            sizes.clear()
            await batcher.submit([(7, 10)])
            assert sizes == [1]
    finally:
        batcher.close()
    single: MicroBatcher[int] = MicroBatcher(
        lambda items: np.zeros((len(items), 1), dtype=np.float32), dim=1, limiter=anyio.CapacityLimiter(1)
    )
    try:
        await single.submit([(i, 10) for i in range(9)])
        assert single.batches_run == 1
    finally:
        single.close()

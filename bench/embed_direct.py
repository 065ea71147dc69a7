"""Direct onnxruntime throughput of the embedding model on fixed, generated text.

``measure_direct(...)`` runs the int8 all-MiniLM-L6-v2 in this process (no bus,
no asyncio) and returns chunks/s; ``bench/embed.py`` reuses it as the baseline
for the service path.  ``main`` runs the grid behind the table in
``specs/embedding.md``, one subprocess per configuration so peak RSS is per
configuration.

Usage::

    python -m bench.embed_direct            # the full grid, one JSON line per configuration
    python -m bench.embed_direct --quick    # threads 1/2 at batch 1 only
    python -m bench.embed_direct --backend  # through OnnxEmbeddingBackend: batch budgets, queries vs chunks
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import anyio

from hearthnet.services.embedding.model_files import ModelFiles, find_model_files
from hearthnet.services.embedding.onnx_backend import Encoded, OnnxEmbeddingBackend, OnnxModel, OnnxSettings

__all__ = ["BackendResult", "DirectResult", "make_chunks", "measure_backend", "measure_direct"]

_WORDS = (
    "the community shares documents about water pumps solar panels and seed storage "
    "members keep notes on repairs harvest dates soil tests and the village clinic schedule "
    "each node indexes its own files and answers questions from peers on the local network "
    "a battery bank stores energy for the night while the inverter feeds the fridge "
    "rainfall was measured at the school and the results were compared with last year"
).split()


@dataclass(frozen=True)
class DirectResult:
    intra_op_threads: int
    parallel: int
    batch_size: int
    grouped: bool
    mem_arena: bool
    spinning: bool
    lengths: str
    chunks: int
    tokens: int
    seconds: float
    chunks_per_s: float
    peak_rss_mb: float
    load_avg_1m: float
    """The machine's 1-minute load average at the end: > 0.5 means the numbers are not from an idle box."""


def make_chunks(model: OnnxModel, n: int, *, min_tokens: int, max_tokens: int, seed: int = 7) -> list[str]:
    """``n`` deterministic texts whose token counts are spread over ``[min_tokens, max_tokens]``."""
    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(n):
        target = rng.randint(min_tokens, max_tokens)
        words = [rng.choice(_WORDS) for _ in range(target)]
        # One word is about one token here; trim until the tokenizer agrees.
        while model.count_tokens([" ".join(words)])[0] > target:
            words.pop()
        out.append(" ".join(words))
    return out


def measure_direct(
    *,
    files: ModelFiles | None = None,
    intra_op_threads: int = 2,
    parallel: int = 1,
    batch_size: int = 1,
    grouped: bool = True,
    mem_arena: bool = False,
    spinning: bool = False,
    n_chunks: int = 48,
    lengths: tuple[int, int] = (240, 256),
) -> DirectResult:
    """chunks/s of ``session.run`` over ``n_chunks`` texts (after one warm-up batch)."""
    settings = OnnxSettings(
        intra_op_threads=intra_op_threads, enable_mem_arena=mem_arena, allow_spinning=spinning
    )
    model = OnnxModel(files or find_model_files(), settings)
    texts = make_chunks(model, n_chunks, min_tokens=lengths[0], max_tokens=lengths[1])
    encs = model.tokenize(texts)
    order = sorted(range(len(encs)), key=lambda i: encs[i].length) if grouped else list(range(len(encs)))
    batches: list[list[Encoded]] = [
        [encs[i] for i in order[s : s + batch_size]] for s in range(0, len(order), batch_size)
    ]
    model.run(batches[0])  # warm-up: first run allocates and optimizes
    start = time.perf_counter()
    if parallel == 1:
        for b in batches:
            model.run(b)
    else:
        with ThreadPoolExecutor(parallel) as pool:
            list(pool.map(model.run, batches))
    seconds = time.perf_counter() - start
    return DirectResult(
        intra_op_threads=intra_op_threads,
        parallel=parallel,
        batch_size=batch_size,
        grouped=grouped,
        mem_arena=mem_arena,
        spinning=spinning,
        lengths=f"{lengths[0]}-{lengths[1]}",
        chunks=len(encs),
        tokens=sum(e.length for e in encs),
        seconds=round(seconds, 3),
        chunks_per_s=round(len(encs) / seconds, 1),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        load_avg_1m=round(os.getloadavg()[0], 2),
    )


@dataclass(frozen=True)
class BackendResult:
    max_batch_tokens: int
    max_batch_items: int
    workload: str
    calls: int
    texts: int
    batches: int
    seconds: float
    texts_per_s: float
    peak_rss_mb: float
    load_avg_1m: float


def measure_backend(
    *,
    files: ModelFiles | None = None,
    max_batch_tokens: int = 2048,
    max_batch_items: int = 32,
    workload: str = "chunks",
    n: int = 48,
) -> BackendResult:
    """Texts/s through :class:`OnnxEmbeddingBackend` (tokenizer, micro-batcher, worker thread).

    ``workload="chunks"``: one call with ``n`` 60..256-token chunks (ingest).
    ``workload="queries"``: ``n`` concurrent one-query calls of 8..20 tokens (search traffic).
    """
    settings = OnnxSettings(max_batch_tokens=max_batch_tokens, max_batch_items=max_batch_items)
    model = OnnxModel(files or find_model_files(), settings)
    if workload == "chunks":
        texts = make_chunks(model, n, min_tokens=60, max_tokens=256)
    else:
        texts = make_chunks(model, n, min_tokens=8, max_tokens=20)

    async def run() -> tuple[float, int]:
        backend = OnnxEmbeddingBackend(model)
        await backend.embed(texts[:1], normalize=True)  # warm-up
        before = backend.batches_run
        start = time.perf_counter()
        if workload == "chunks":
            await backend.embed(texts, normalize=True)
        else:
            async with anyio.create_task_group() as tg:
                for t in texts:
                    tg.start_soon(partial(backend.embed, [t], normalize=True))
        return time.perf_counter() - start, backend.batches_run - before

    seconds, batches = anyio.run(run)
    return BackendResult(
        max_batch_tokens=max_batch_tokens,
        max_batch_items=max_batch_items,
        workload=workload,
        calls=1 if workload == "chunks" else n,
        texts=n,
        batches=batches,
        seconds=round(seconds, 3),
        texts_per_s=round(n / seconds, 1),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        load_avg_1m=round(os.getloadavg()[0], 2),
    )


def _grid(quick: bool, key: bool = False) -> list[dict[str, Any]]:
    if quick:
        return [{"intra_op_threads": t} for t in (1, 2)]
    if key:  # the decisive comparisons, interleaved and repeated to average out a busy machine
        one: list[dict[str, Any]] = [
            {"intra_op_threads": 1, "batch_size": 1},
            {"intra_op_threads": 2, "batch_size": 1},
            {"intra_op_threads": 1, "parallel": 2, "batch_size": 1},
            {"intra_op_threads": 2, "batch_size": 1, "lengths": (60, 256)},
            {"intra_op_threads": 2, "batch_size": 8, "grouped": False, "lengths": (60, 256)},
            {"intra_op_threads": 2, "batch_size": 8, "grouped": True, "lengths": (60, 256)},
            {"intra_op_threads": 2, "batch_size": 32, "grouped": False, "lengths": (60, 256)},
            {"intra_op_threads": 2, "batch_size": 32, "grouped": True, "lengths": (60, 256)},
        ]
        return one + one
    grid: list[dict[str, Any]] = []
    for t in (1, 2):
        for spinning in (False, True):
            grid.append({"intra_op_threads": t, "batch_size": 1, "spinning": spinning})
    grid.append({"intra_op_threads": 1, "parallel": 2, "batch_size": 1})
    for lengths in ((240, 256), (60, 256)):
        for bs in (8, 16, 32):
            for grouped in (False, True):
                grid.append({"intra_op_threads": 2, "batch_size": bs, "grouped": grouped, "lengths": lengths})
    grid.append({"intra_op_threads": 2, "batch_size": 1, "lengths": (60, 256)})
    for arena in (False, True):
        grid.append({"intra_op_threads": 2, "batch_size": 64, "mem_arena": arena, "n_chunks": 128})
    return grid


def _backend_grid() -> list[dict[str, Any]]:
    grid: list[dict[str, Any]] = [{"workload": "queries", "max_batch_items": 1, "n": 32}]
    grid += [
        {"workload": w, "max_batch_tokens": t, "n": 48 if w == "chunks" else 32}
        for w in ("queries", "chunks")
        for t in (256, 512, 2048)
    ]
    return grid


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--key", action="store_true", help="only the decisive comparisons, twice, interleaved")
    ap.add_argument("--backend", action="store_true", help="measure the service path (batcher) instead")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--one-backend", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        kw = json.loads(args.one)
        if "lengths" in kw:
            kw["lengths"] = tuple(kw["lengths"])
        print(json.dumps(asdict(measure_direct(**kw))))
        return
    if args.one_backend:
        print(json.dumps(asdict(measure_backend(**json.loads(args.one_backend)))))
        return
    flag, grid = (
        ("--one-backend", _backend_grid()) if args.backend else ("--one", _grid(args.quick, args.key))
    )
    for kw in grid:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.embed_direct", flag, json.dumps(kw)],
            check=True,
            capture_output=True,
            text=True,
        )
        print(proc.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()

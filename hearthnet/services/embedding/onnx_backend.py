"""all-MiniLM-L6-v2 in-process: onnxruntime + tokenizers, no PyTorch, nothing downloaded.

:class:`OnnxModel` is the blocking core (tokenize, pad, run, mean-pool); it is
only ever called from worker threads.  :class:`OnnxEmbeddingBackend` is the
async face: inference runs in the batcher's worker threads under one
``CapacityLimiter`` and concurrent callers share micro-batches
(:mod:`.batcher`); long inputs are tokenized through ``anyio.to_thread``,
query-sized ones inline.  Bulk work (an ingest's chunks) has its own lane: its own batcher
and inference threads at a lower CPU priority (``BULK_NICE``), so a query never waits in a queue
behind an ingest's batches and gets the cores first.  The model is loaded on the first call
(:meth:`OnnxEmbeddingBackend.lazy`): a node that never embeds never holds it.
Settings are justified by measurements in ``specs/embedding.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import numpy as np
import numpy.typing as npt
import structlog

from hearthnet.errors import InternalError
from hearthnet.services.embedding.backend import EmbedBatch, l2_normalize
from hearthnet.services.embedding.batcher import MicroBatcher
from hearthnet.services.embedding.model_files import ModelFiles, ModelUnavailable

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["DEFAULT_MODEL_NAME", "Encoded", "OnnxEmbeddingBackend", "OnnxModel", "OnnxSettings"]

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
MAX_TOKENS = 256
"""The window all-MiniLM-L6-v2 was trained with; the shipped tokenizer.json says 128, we set 256."""


BULK_NICE = 10
"""How much lower the bulk lane's inference threads run than the rest of the node (nice value):
under CPU contention a query's inference gets ~9 of 10 time slices against an ingest's."""

log = structlog.get_logger("hearthnet.embedding")

INLINE_TOKENIZE_CHARS = 256
"""Up to this much text (a typical query) is tokenized on the event loop, where it costs less than a
thread hop (``specs/embedding.md``); longer inputs go to a worker thread."""


@dataclass(frozen=True)
class OnnxSettings:
    """Knobs for the in-process model; defaults come from the measurements in specs/embedding.md."""

    model_name: str = DEFAULT_MODEL_NAME
    intra_op_threads: int = 1
    """Threads inside one inference: two 1-thread inferences side by side beat one 2-thread one."""
    inference_threads: int = 2
    """Concurrent inferences (the one CapacityLimiter); set to the number of cores you give the embedder."""
    max_batch_items: int = 32
    max_batch_tokens: int = 512
    """Padded tokens (rows x longest row) per micro-batch.  Batching long chunks is slower on CPU, batching
    short queries is much faster: 512 lets 32 queries share a batch but at most two full-window chunks."""
    enable_mem_arena: bool = False
    """onnxruntime's CPU arena keeps every batch shape's peak (``specs/embedding.md``): off."""
    max_tokens: int = MAX_TOKENS
    allow_spinning: bool = False
    """Idle intra-op threads spin by default; on a shared 2-core box spinning steals CPU from the rest."""

    def __post_init__(self) -> None:
        if self.intra_op_threads < 1 or self.inference_threads < 1:
            raise ValueError("intra_op_threads and inference_threads must be at least 1")
        if self.max_batch_items < 1:
            raise ValueError("max_batch_items must be at least 1")
        if not 2 <= self.max_tokens <= 512:
            raise ValueError("max_tokens must be in 2..512 for all-MiniLM-L6-v2")
        if self.max_batch_tokens < self.max_tokens:
            raise ValueError("max_batch_tokens must hold at least one full-length input")


@dataclass(frozen=True)
class Encoded:
    """One tokenized input: ids (int64) cut at the window, and whether it was cut."""

    ids: npt.NDArray[np.int64]
    truncated: bool

    @property
    def length(self) -> int:
        return int(self.ids.shape[0])


class OnnxModel:
    """The blocking model: call only from worker threads (``session.run`` is thread-safe)."""

    def __init__(self, files: ModelFiles, settings: OnnxSettings | None = None) -> None:
        import onnxruntime as ort  # 20 MB of library: only once a model is loaded
        from tokenizers import Tokenizer

        self.settings = settings or OnnxSettings()
        self.files = files
        try:
            self._tokenizer = Tokenizer.from_file(str(files.tokenizer_path))
            self._full_tokenizer = Tokenizer.from_file(str(files.tokenizer_path))
        except Exception as exc:  # tokenizers raises a bare Exception on parse errors
            raise ModelUnavailable(f"{files.tokenizer_path} is not a valid tokenizer.json: {exc}") from exc
        # The file ships truncation 128 and fixed padding 128: set the real window, pad per batch ourselves.
        self._tokenizer.enable_truncation(max_length=self.settings.max_tokens)
        self._tokenizer.no_padding()
        self._full_tokenizer.no_truncation()
        self._full_tokenizer.no_padding()
        try:
            self._session = ort.InferenceSession(
                str(files.model_path),
                sess_options=session_options(self.settings),
                providers=["CPUExecutionProvider"],
            )
        except Exception as exc:  # onnxruntime raises its own untyped exceptions
            raise ModelUnavailable(f"onnxruntime cannot load {files.model_path}: {exc}") from exc
        names = {i.name for i in self._session.get_inputs()}
        if names != {"input_ids", "attention_mask", "token_type_ids"}:
            raise ModelUnavailable(f"{files.model_path} has unexpected inputs {sorted(names)}")

    def tokenize(self, texts: Sequence[str]) -> list[Encoded]:
        encs = self._tokenizer.encode_batch(list(texts))
        return [Encoded(np.asarray(e.ids, dtype=np.int64), bool(e.overflowing)) for e in encs]

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Token counts without truncation (special tokens included), for chunkers."""
        return [len(e.ids) for e in self._full_tokenizer.encode_batch(list(texts))]

    def run(self, batch: Sequence[Encoded]) -> npt.NDArray[np.float32]:
        """Mean-pooled (not normalized) vectors, in input order; one padded ``session.run``."""
        if not batch:
            return np.zeros((0, DIM), dtype=np.float32)
        width = max(e.length for e in batch)
        ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, enc in enumerate(batch):
            ids[row, : enc.length] = enc.ids
            mask[row, : enc.length] = 1
        (hidden,) = self._session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )
        weights = mask[:, :, None].astype(np.float32)
        summed = (np.asarray(hidden, dtype=np.float32) * weights).sum(axis=1)
        pooled: npt.NDArray[np.float32] = (summed / np.maximum(weights.sum(axis=1), 1e-9)).astype(np.float32)
        return pooled

    def embed_sorted(self, texts: Sequence[str], batch_size: int) -> npt.NDArray[np.float32]:
        """Blocking helper (bench, scripts): length-sorted batches of ``batch_size``, input order kept."""
        encs = self.tokenize(texts)
        order = sorted(range(len(encs)), key=lambda i: encs[i].length)
        out = np.zeros((len(encs), DIM), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            out[idx] = self.run([encs[i] for i in idx])
        return out


def session_options(settings: OnnxSettings) -> ort.SessionOptions:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = settings.intra_op_threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.enable_cpu_mem_arena = settings.enable_mem_arena
    opts.enable_mem_pattern = settings.enable_mem_arena
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if settings.allow_spinning else "0")
    return opts


class OnnxEmbeddingBackend:
    """The default backend: :meth:`load` loads the model now, :meth:`lazy` on the first call
    (blocking either way: hashes and loads ~23 MB, a few hundred MB once running)."""

    def __init__(
        self,
        model: OnnxModel | None = None,
        *,
        settings: OnnxSettings | None = None,
        loader: Callable[[], OnnxModel] | None = None,
    ) -> None:
        if model is None and loader is None:
            raise ValueError("give a model, or a loader for the first call")
        self._model = model
        self._loader = loader
        s = model.settings if model is not None else (settings or OnnxSettings())
        self.model = s.model_name
        self.dim = DIM
        self.max_tokens = s.max_tokens
        self._loading = anyio.Lock()
        self._limiter = anyio.CapacityLimiter(s.inference_threads)
        self._bulk_limiter = anyio.CapacityLimiter(s.inference_threads)
        self._tokenize_limiter = anyio.CapacityLimiter(2)
        self._batcher: MicroBatcher[Encoded] = MicroBatcher(
            self._run,
            dim=DIM,
            limiter=self._limiter,
            max_batch_items=s.max_batch_items,
            max_batch_tokens=s.max_batch_tokens,
        )
        # Bulk batches hold at most one full-window chunk's padded tokens: batching long chunks is
        # no faster on CPU (specs/embedding.md), and each concurrent inference of two 256-token
        # rows costs ~110 MB more peak memory than one of one (the lanes run side by side).
        self._bulk: MicroBatcher[Encoded] = MicroBatcher(
            self._run,
            dim=DIM,
            limiter=self._bulk_limiter,
            max_batch_items=s.max_batch_items,
            max_batch_tokens=s.max_tokens,
            nice=BULK_NICE,
        )

    @classmethod
    def load(cls, files: ModelFiles, settings: OnnxSettings | None = None) -> OnnxEmbeddingBackend:
        return cls(OnnxModel(files, settings))

    @classmethod
    def lazy(cls, files: ModelFiles, settings: OnnxSettings | None = None) -> OnnxEmbeddingBackend:
        """A backend whose model is loaded by its first call (``files`` are already verified)."""
        return cls(settings=settings, loader=lambda: OnnxModel(files, settings))

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        return self._limiter

    @property
    def batches_run(self) -> int:
        """Inference batches run so far, both lanes (stats, benchmarks)."""
        return self._batcher.batches_run + self._bulk.batches_run

    def _run(self, batch: list[Encoded]) -> npt.NDArray[np.float32]:
        assert self._model is not None  # loaded before any batch is queued
        return self._model.run(batch)

    async def _ready(self) -> OnnxModel:
        if self._model is not None:
            return self._model
        async with self._loading:
            if self._model is None:
                assert self._loader is not None
                started = anyio.current_time()
                try:
                    self._model = await anyio.to_thread.run_sync(self._loader)
                except ModelUnavailable as exc:
                    raise InternalError(f"embedding model {self.model} does not load: {exc.message}") from exc
                took = round(anyio.current_time() - started, 2)
                log.info("embedding_model_loaded", model=self.model, seconds=took)
        return self._model

    async def embed(self, texts: Sequence[str], *, normalize: bool, bulk: bool = False) -> EmbedBatch:
        model = await self._ready()
        if not bulk and sum(len(t) for t in texts) <= INLINE_TOKENIZE_CHARS:
            # A query-sized text tokenizes faster than a thread hop would take (see the constant).
            encs = model.tokenize(list(texts))
        else:
            encs = await anyio.to_thread.run_sync(model.tokenize, list(texts), limiter=self._tokenize_limiter)
        lane = self._bulk if bulk else self._batcher
        pooled = await lane.submit([(e, e.length) for e in encs])
        vectors = l2_normalize(pooled) if normalize else pooled
        return EmbedBatch(
            vectors=vectors,
            tokens=sum(e.length for e in encs),
            truncated=sum(1 for e in encs if e.truncated),
        )

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        if self._model is None:
            raise RuntimeError("count_tokens before the model was loaded (embed once first)")
        return self._model.count_tokens(texts)

    async def aclose(self) -> None:
        """End the inference threads (batches already running finish first)."""
        self._batcher.close()
        self._bulk.close()

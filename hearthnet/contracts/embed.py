"""The ``embed.text@1.0`` contract: texts in, packed float32 vectors out; and :class:`Embedder`,
the typed client every caller (the RAG service, archives, the composer) embeds through.

Input ``{texts: 1..256 strings (each <= 8192 chars), normalize = true}``; output ``{embeddings:
f32le bytes (count x dim), dim, count, encoding}``; meta ``{model, ms, tokens, truncated}``.  A
provider's params ``{model, dim, max_tokens}`` name its model and advertise its window; calls
choose a provider by the exact model name (a corpus embedded with one model is never queried
with another).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import structlog

from hearthnet.bus.api import BusAPI
from hearthnet.bus.context import CallResult
from hearthnet.bus.descriptors import ParamsPredicate, params_key_equals
from hearthnet.contracts.base import Caller, checked_texts
from hearthnet.errors import (
    BadRequest,
    BusError,
    CapacityExceeded,
    InternalError,
    NotFound,
    Partition,
    SchemaMismatch,
    Timeout,
    unwrap_group,
)
from hearthnet.runtime.pace import Pace

__all__ = [
    "BUSY",
    "CAPABILITY",
    "DEFAULT_WINDOW",
    "ENCODING",
    "MAX_DIM",
    "MAX_PACKED_DIM",
    "MAX_TEXTS",
    "MAX_TEXT_CHARS",
    "PER_TOKEN_SECONDS",
    "PREDICATE",
    "VERSION",
    "Busy",
    "Embedded",
    "Embedder",
    "decode_embeddings",
    "embed_texts",
    "estimate_tokens",
    "no_provider",
    "pack_vectors",
    "unpack_vectors",
    "validate_embed_input",
]

CAPABILITY = "embed.text"
VERSION = (1, 0)
MAX_TEXTS = 256
MAX_TEXT_CHARS = 8192
ENCODING = "f32le"
MAX_PACKED_DIM = 65_536
"""Widest vector :func:`unpack_vectors` reads at all."""
MAX_DIM = 8192
"""Widest embedding a caller accepts from a provider (OpenAI's largest is 3,072)."""
DEFAULT_WINDOW = 256
"""Chunk for this many tokens when no provider says its window (MiniLM's)."""
MIN_ADVERTISED_WINDOW = 128
"""Windows remote providers advertise below this are not believed (no real text model is smaller)."""
PER_TOKEN_SECONDS = 0.01
"""The embedder's pace before any call was measured: a slow guess (a Raspberry Pi's core does
all-MiniLM at ~1 ms a token; a call's deadline is several times the expected time)."""
BUSY = "waiting for the embedder (busy)"
"""What a bulk call's progress says while its call takes longer than the embedder's pace."""
SINGLE_TEXT_RETRIES = 6
"""Times one text that overran its (each time doubled) deadline is sent again while its provider
still answers a probe: past this the embedder answers but cannot embed, and the call fails."""
PREDICATE: ParamsPredicate = params_key_equals("model")
"""A provider fits a call that names its model (or names none)."""

_F32LE = np.dtype("<f4")
log = structlog.get_logger("hearthnet.contracts.embed")


def validate_embed_input(input: Mapping[str, Any]) -> tuple[list[str], bool]:
    """``input`` -> ``(texts, normalize)``, or ``BadRequest`` saying what is wrong."""
    if not isinstance(input, Mapping):
        raise BadRequest("input must be a map {texts, normalize?}")
    texts = checked_texts(input, max_texts=MAX_TEXTS, max_chars=MAX_TEXT_CHARS, advice="split it")
    normalize = input.get("normalize", True)
    if not isinstance(normalize, bool):
        raise BadRequest("input.normalize must be true or false")
    if not isinstance(input.get("bulk", False), bool):
        raise BadRequest("input.bulk must be true or false")
    return texts, normalize


def estimate_tokens(texts: Sequence[str]) -> int:
    """About the tokens ``texts`` make (four characters a token, two special tokens a text): the
    size of an embedding call, known before it is made."""
    return sum(len(t) for t in texts) // 4 + 2 * len(texts)


# -- vectors as they travel: a float32 little-endian row-major matrix as msgpack ``bin`` --------
def pack_vectors(vectors: npt.NDArray[Any]) -> bytes:
    """A 2-d matrix -> its float32 little-endian row-major bytes."""
    arr = np.asarray(vectors)
    if arr.ndim != 2:
        raise BadRequest(f"vectors must be a 2-d matrix, got {arr.ndim} dimensions")
    return np.ascontiguousarray(arr, dtype=_F32LE).tobytes()


def unpack_vectors(data: bytes, dim: int, count: int | None = None) -> npt.NDArray[np.float32]:
    """Bytes -> a float32 ``(n, dim)`` matrix; any length or shape mismatch is ``BadRequest``."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise BadRequest(f"embeddings must be bytes, got {type(data).__name__}")
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_PACKED_DIM:
        raise BadRequest(f"dim must be an integer in 1..{MAX_PACKED_DIM}")
    row_bytes = dim * _F32LE.itemsize
    size = len(data) if not isinstance(data, memoryview) else data.nbytes
    if size % row_bytes:
        raise BadRequest(f"embeddings are {size} bytes, not a whole number of {dim}-d float32 rows")
    rows = size // row_bytes
    if count is not None and rows != count:
        raise BadRequest(f"embeddings hold {rows} vectors, expected {count}")
    # astype copies into a writable, native-order array the caller owns.
    return np.frombuffer(data, dtype=_F32LE).reshape(rows, dim).astype(np.float32)


def decode_embeddings(output: Mapping[str, Any]) -> npt.NDArray[np.float32]:
    """An ``embed.text`` output map -> a float32 ``(count, dim)`` matrix."""
    encoding = output.get("encoding", ENCODING)
    if encoding != ENCODING:
        raise BadRequest(f"unsupported embeddings encoding {encoding!r:.20}; expected {ENCODING!r}")
    dim = output.get("dim")
    count = output.get("count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
        raise BadRequest("count must be an integer")
    data = output.get("embeddings")
    if not isinstance(data, bytes | bytearray):
        raise BadRequest("embeddings must be packed float32 bytes")
    if not isinstance(dim, int):
        raise BadRequest("dim must be an integer")
    return unpack_vectors(bytes(data), dim, count)


# -- the typed client ------------------------------------------------------------------------------
def no_provider(model: str, detail: str = "") -> Partition:
    """The error for a model no reachable node serves, with what to do about it."""
    tail = f" ({detail})" if detail else ""
    return Partition(
        f"no embed.text provider for model {model} is reachable{tail}: a node must serve it, e.g. with an "
        "[[embedding.openai]] entry pointing at a TEI or OpenAI-compatible server for that model"
    )


@dataclass(frozen=True)
class Embedded:
    """An answer of ``embed.text``, checked: one finite row per text."""

    vectors: npt.NDArray[np.float32]
    """``(len(texts), dim)`` float32."""
    tokens: int
    truncated: int
    """Texts the provider cut to its window."""
    provider: str


Busy = Callable[[], Awaitable[None]]
"""Told once a bulk call has taken longer than the embedder's pace says it should (it is busy)."""


@dataclass(frozen=True)
class Embedder:
    """Texts embedded with ``model`` by whichever node serves it, over the bus (a caller never
    imports an embedder, so a GPU box can embed for a Raspberry Pi).

    A call's deadline follows its size (:func:`estimate_tokens`) and the pace its providers
    showed lately (``pace``, per provider node): ``timeout_seconds`` is its floor.
    """

    bus: BusAPI
    model: str
    timeout_seconds: float
    pace: Pace = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.pace is None:
            object.__setattr__(self, "pace", Pace(per_unit=PER_TOKEN_SECONDS, floor=self.timeout_seconds))

    def max_tokens(self) -> int:
        """The model window chunks are cut for (``partition`` if no provider is reachable).

        A provider on this node is the one calls go to first, so its window
        counts when there is one.  Otherwise the smallest window that remote
        providers advertise, ignoring any below ``MIN_ADVERTISED_WINDOW``: a
        member advertising a window of 1 token must not make every ingest in
        the community fail, or shrink every chunk to a few words.
        """
        providers = self.bus.providers(CAPABILITY, VERSION, {"model": self.model})
        if not providers:
            raise Partition(f"no embed.text provider for model {self.model} is reachable")
        local = [p for p in providers if p.is_local]
        windows = [p.descriptor.params.get("max_tokens") for p in (local or providers)]
        known = [w for w in windows if type(w) is int and w > 0]
        if local:
            return min(known) if known else DEFAULT_WINDOW
        usable = [w for w in known if w >= MIN_ADVERTISED_WINDOW]
        if known and not usable:
            log.warning("embed_windows_ignored", model=self.model, smallest=min(known))
        return min(usable) if usable else DEFAULT_WINDOW

    def _providers(self) -> list[str]:
        return [p.node_id for p in self.bus.providers(CAPABILITY, VERSION, {"model": self.model})]

    async def embed(self, texts: Sequence[str], *, bulk: bool = False) -> Embedded:
        """``texts`` embedded (normalised) in one call, within a deadline from their size and the
        providers' pace; ``bulk`` work (an ingest) yields to queries on the provider.  ``partition``
        if no provider of the model answers, ``timeout`` past the deadline, ``internal_error`` for
        an answer that is malformed, of the wrong count or not finite."""
        units = estimate_tokens(texts)
        started = anyio.current_time()
        inp: dict[str, Any] = {"texts": list(texts), "normalize": True}
        if bulk:
            inp["bulk"] = True
        try:
            result = await self.bus.call(
                CAPABILITY,
                VERSION,
                params={"model": self.model},
                input=inp,
                timeout=self.pace.deadline(units, self._providers()),
            )
        except (NotFound, SchemaMismatch) as exc:  # no provider, or it went away since it was listed
            raise no_provider(self.model, exc.message) from exc
        except Timeout:
            if bulk:
                self.pace.overran(self._providers(), units, anyio.current_time() - started)
            raise
        provider = result.provider or "unknown"
        if bulk:  # a question takes the provider's fast lane: its time says nothing of bulk work
            self.pace.record(provider, units, anyio.current_time() - started)
        return self._checked(texts, result.output, result.meta, provider)

    async def embed_patiently(self, texts: Sequence[str], *, busy: Busy | None = None) -> Embedded:
        """``texts`` embedded as bulk work that a busy embedder slows down but does not fail.

        A call that overruns its deadline is split in two and each half sent again (with the
        deadline its provider's slower pace now gives); a provider at capacity is waited for
        as long as it asks.  One text that overruns is sent again only while a provider still
        answers a probe (:meth:`probe`): the call fails when the embedder is gone, saying so.
        ``busy`` is told while a call takes longer than the pace says (progress shows it).
        """
        overruns = 0
        while True:
            try:
                return await self._watched(texts, busy)
            except CapacityExceeded as exc:
                await anyio.sleep(max(0.05, (exc.retry_after_ms or 1000) / 1000))
            except Timeout as exc:
                if len(texts) > 1:
                    half = len(texts) // 2
                    first = await self.embed_patiently(texts[:half], busy=busy)
                    rest = await self.embed_patiently(texts[half:], busy=busy)
                    return _joined(first, rest)
                overruns += 1
                await self.probe()
                if overruns > SINGLE_TEXT_RETRIES:
                    raise Timeout(
                        f"the embed.text provider of {self.model} answers but did not embed one text "
                        f"in {overruns} tries with ever longer deadlines"
                    ) from exc

    async def _watched(self, texts: Sequence[str], busy: Busy | None) -> Embedded:
        """One bulk call; ``busy`` told once it runs past the expected time."""
        if busy is None:
            return await self.embed(texts, bulk=True)
        expected = 2 * self.pace.expected(estimate_tokens(texts), self._providers())
        answer: Embedded | None = None
        try:
            async with anyio.create_task_group() as tg:

                async def overdue() -> None:
                    await anyio.sleep(expected)
                    await busy()

                tg.start_soon(overdue)
                try:
                    answer = await self.embed(texts, bulk=True)
                finally:
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise unwrap_group(group) from None
        assert answer is not None
        return answer

    async def probe(self) -> None:
        """Whether the embedder is still there: a provider on this node is (its process is this
        one); a remote one must answer ``node.ping``.  ``partition`` saying so when none does."""
        providers = self.bus.providers(CAPABILITY, VERSION, {"model": self.model})
        if any(p.is_local for p in providers):
            return
        for p in providers:
            try:
                await self.bus.call("node.ping", (1, 0), provider=p.node_id, timeout=self.timeout_seconds)
            except BusError:
                continue
            return
        raise Partition(
            f"the embedder is gone: no embed.text provider of {self.model} answers a probe "
            f"({len(providers)} listed); the ingest stops, nothing of it is kept"
        )

    def _checked(
        self, texts: Sequence[str], output: Mapping[str, Any], meta: Mapping[str, Any], provider: str
    ) -> Embedded:
        try:
            vectors = decode_embeddings(output)
        except BadRequest as exc:  # the provider's answer is malformed, not the caller's request
            raise InternalError(
                f"embed.text for {self.model} answered malformed vectors: {exc.message}"
            ) from exc
        if vectors.shape[0] != len(texts):
            raise InternalError(
                f"embed.text for {self.model} returned {vectors.shape[0]} vectors for {len(texts)} texts "
                f"(provider {provider})"
            )
        if not np.isfinite(vectors).all() or not 0 < vectors.shape[1] <= MAX_DIM:
            raise InternalError(
                f"embed.text for {self.model} answered {vectors.shape[1]}-d vectors that are not all finite "
                f"numbers (or of an impossible size): provider {provider}"
            )
        return Embedded(vectors, int(meta.get("tokens", 0)), int(meta.get("truncated", 0)), provider)


def _joined(first: Embedded, rest: Embedded) -> Embedded:
    if first.vectors.shape[1] != rest.vectors.shape[1]:
        raise InternalError(
            f"embed.text providers answered vectors of different sizes ({first.vectors.shape[1]}, "
            f"{rest.vectors.shape[1]}) for one call split in two: fix the misconfigured one"
        )
    return Embedded(
        np.concatenate([first.vectors, rest.vectors], axis=0),
        first.tokens + rest.tokens,
        first.truncated + rest.truncated,
        first.provider,
    )


async def embed_texts(
    caller: Caller, model: str, texts: Sequence[str], *, normalize: bool = True, timeout: float | None = None
) -> CallResult:
    """``embed.text`` of ``model`` as a front door calls it: the answer as it came (packed vectors,
    ``dim``, ``meta.tokens``), for the door to shape."""
    return await caller.call(
        CAPABILITY,
        params={"model": model},
        input={"texts": list(texts), "normalize": normalize},
        timeout=timeout,
    )

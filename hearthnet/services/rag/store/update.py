"""A document's title and metadata changed in place, without re-embedding (a part
:class:`~hearthnet.services.rag.store.store.CorpusStore` composes): ``rag.update`` on a host, and a replica
following the host's ``rag.document.updated``.

The ledger's row, the keyword index's copy of each chunk's metadata and a marker saying the rest is
owed change in one transaction (:meth:`Ledger.update_metadata`); then every chunk in ChromaDB and the
in-memory copy.  A kill between them is finished by :meth:`DocumentUpdates.finish_updates` at the next
open (the chunks made again from the ledger's title and metadata: the same result however often),
and an update still to be announced keeps its marker until the caller says it was
(:meth:`DocumentUpdates.update_announced`), so the announcement survives a kill too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import structlog

from hearthnet.errors import BadRequest, NotFound
from hearthnet.services.rag.chunks import RESERVED_METADATA, check_extra_metadata
from hearthnet.services.rag.store.chroma import chroma_errors
from hearthnet.services.rag.store.core import StoreCore
from hearthnet.services.rag.store.document_list import DocumentList

__all__ = ["DocumentUpdate", "DocumentUpdates", "chunk_change", "merged_metadata"]

_log = structlog.get_logger("hearthnet.rag.store")

Change = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class DocumentUpdate:
    """A document's title and caller metadata after an update, and whether they changed."""

    doc_cid: str
    title: str
    metadata: dict[str, Any]
    changed: bool
    filename: str | None = None
    """The file name its chunks name (``doc_filename``; ``None``: the ingest named none)."""
    renamed: bool = False
    """Whether this update changed the file name (only then does its event carry it: nodes from
    before file names were updated refuse an update event with one)."""


def merged_metadata(old: Mapping[str, Any], fields: Mapping[str, Any] | None) -> dict[str, Any]:
    """``old`` with each of ``fields`` set (a ``None`` value removes the field), checked like an
    ingest's metadata (``bad_request`` naming what is wrong)."""
    out = dict(old)
    for key, value in (fields or {}).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return check_extra_metadata(out)


def _named_after(title: str, filename: str | None) -> bool:
    """Whether ``title`` is the file name's stem: the title an ingest gives a document whose
    content names none (it follows the file when the file is renamed)."""
    return bool(filename) and title == PurePath(str(filename)).stem


def chunk_change(title: str, metadata: Mapping[str, Any], filename: str | None = None) -> Change:
    """What a chunk's metadata becomes: the chunker's keys kept, ``doc_title`` the new title,
    ``doc_filename`` the new file name (if any), the caller's fields exactly ``metadata``."""

    def change(old: dict[str, Any]) -> dict[str, Any]:
        kept = {k: v for k, v in old.items() if k in RESERVED_METADATA}
        named = {} if filename is None else {"doc_filename": filename}
        return {**kept, **metadata, "doc_title": title, **named}

    return change


@dataclass(kw_only=True, eq=False)
class DocumentUpdates:
    """:meth:`update_document` and what finishes it: a part :class:`CorpusStore` composes.

    Given what it uses of the store: its ``core``, ``docs`` (the document list: a document's title
    and metadata, the metadata keys to read again) and ``corpora`` (the corpora held).  Blocking,
    thread-safe.
    """

    core: StoreCore
    docs: DocumentList
    corpora: Callable[[], list[str]]

    def update_document(
        self,
        name: str,
        doc_cid: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        title: str | None = None,
        filename: str | None = None,
        announce: bool = False,
    ) -> DocumentUpdate | None:
        """Give a complete document ``title`` and the file name ``filename`` and set each of
        ``metadata`` (``None`` removes a field); ``None`` if the corpus does not hold the document
        complete.  Nothing is written when nothing changes.  ``announce``: the caller appends an
        event and then calls :meth:`update_announced` (until then the update is in
        :meth:`pending_updates`)."""
        col = self.core.collection(name)
        with self.core.lock:
            if doc_cid in self.core.writing(name):
                raise BadRequest(
                    f"document {doc_cid} is being written to corpus {name!r}; update it when that is done"
                )
            doc = self.docs.document(name, doc_cid)
            if doc is None:
                return None
            new_meta = merged_metadata(doc["metadata"], metadata)
            new_name = doc.get("filename") if filename is None else filename
            new_title = doc["title"] if title is None else title
            if title is None and _named_after(doc["title"], doc.get("filename")) and new_name:
                new_title = PurePath(new_name).stem or new_title  # a title that was the file's name
            if (new_title, new_meta, new_name) == (doc["title"], doc["metadata"], doc.get("filename")):
                return DocumentUpdate(doc_cid, new_title, new_meta, changed=False, filename=new_name)
            change = chunk_change(new_title, new_meta, new_name)
            if not self.core.ledger.update_metadata(
                name,
                doc_cid,
                title=new_title,
                metadata=new_meta,
                filename=new_name,
                change=change,
                announce=announce,
            ):
                return None
            self.docs.changed(name)
            self.core.memory.updated(name, doc_cid, change)
        self._write_chunk_metadata(col, doc_cid, change)
        with self.core.lock:
            self.core.ledger.update_written(name, doc_cid)
        _log.info("rag_document_updated", corpus=name, doc_cid=doc_cid, fields=len(new_meta))
        renamed = new_name != doc.get("filename")
        return DocumentUpdate(doc_cid, new_title, new_meta, changed=True, filename=new_name, renamed=renamed)

    def _write_chunk_metadata(self, col: Any, doc_cid: str, change: Change) -> None:
        """Every chunk of ``doc_cid`` in ChromaDB gets ``change`` of its metadata (a field it no
        longer has is removed: ChromaDB merges what it is given, and ``None`` deletes)."""
        with chroma_errors("read a document's chunk metadata"):
            got = col.get(where={"doc_cid": doc_cid}, include=["metadatas"])
        ids = [str(i) for i in got["ids"]]
        metas = []
        for old in got["metadatas"] or []:
            old = dict(old or {})
            new: dict[str, Any] = dict(change(old))
            metas.append({**{k: None for k in old if k not in new}, **new})
        for a in range(0, len(ids), self.core.batch):
            with chroma_errors("update chunk metadata"):
                col.update(ids=ids[a : a + self.core.batch], metadatas=metas[a : a + self.core.batch])

    def pending_updates(self) -> list[tuple[str, str]]:
        """``(corpus, doc_cid)`` of updates written but not yet announced."""
        with self.core.lock:
            return [(c, d) for c, d, announce in self.core.ledger.pending_updates() if announce]

    def update_announced(self, name: str, doc_cid: str) -> None:
        with self.core.lock:
            self.core.ledger.update_announced(name, doc_cid)

    def finish_updates(self) -> int:
        """Write again into ChromaDB each update a kill may have cut short (from the ledger's title
        and metadata); returns how many.  A document no longer complete needs nothing."""
        done = 0
        with self.core.lock:
            pending = self.core.ledger.pending_updates()
            held = set(self.corpora())
        for corpus, doc_cid, _ in pending:
            try:
                doc = self.docs.document(corpus, doc_cid) if corpus in held else None
                if doc is None:
                    with self.core.lock:
                        self.core.ledger.update_announced(corpus, doc_cid)
                    continue
                change = chunk_change(str(doc["title"]), doc["metadata"], doc.get("filename"))
                self._write_chunk_metadata(self.core.collection(corpus), doc_cid, change)
                with self.core.lock:
                    self.core.ledger.update_written(corpus, doc_cid)
                    self.core.memory.updated(corpus, doc_cid, change)
                done += 1
            except NotFound:
                continue  # a corpus whose collection is missing on a server: finished when it is back
        if done:
            _log.warning("rag_updates_finished", documents=done)
        return done

"""``rag.watch``: the folders this node keeps indexed, each a :class:`FolderWatch` in the
service's task group, their state in ``folders.sqlite`` in the node's home.

Folders come from ``[[rag.folders]]`` in config.toml (``path``, ``corpus``) and from
``hearthnet watch add``; a folder named in the config is removed there, not by ``watch remove``.
Watching needs this node to be ``trusted``: what it ingests is announced under its signature.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import structlog

from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.community.levels import Level
from hearthnet.contracts.base import Caller, check_input_keys
from hearthnet.contracts.folders import ACTIONS, WATCH
from hearthnet.contracts.rag import check_writable, validate_corpus_name
from hearthnet.errors import BadRequest, NotFound, Unauthorized
from hearthnet.runtime.blocking import run_blocking
from hearthnet.services.rag.folders.apply import CorpusWriter
from hearthnet.services.rag.folders.state import FolderState
from hearthnet.services.rag.folders.watcher import FolderWatch, WatchSettings

__all__ = ["FolderService"]

log = structlog.get_logger("hearthnet.rag.folders")
MAX_FOLDERS = 64


class FolderService:
    name = "folders"

    def __init__(
        self,
        *,
        bus: Caller,
        node_id: str,
        state_path: Path,
        configured: tuple[tuple[str, str], ...],
        own_level: Callable[[], Level | None],
        settings: WatchSettings | None = None,
    ) -> None:
        self._bus = bus
        self._node_id = node_id
        self._state_path = state_path
        self._configured = configured
        self._own_level = own_level
        self._settings = settings or WatchSettings()
        self._threads = anyio.CapacityLimiter(2)
        self._state: FolderState | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self.watches: dict[str, FolderWatch] = {}
        self._scopes: dict[str, anyio.CancelScope] = {}

    # lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        self._state = state = await run_blocking(FolderState, self._state_path, limiter=self._threads)
        configured = self._configured
        named: dict[str, str] = await run_blocking(
            lambda: {str(Path(p).expanduser().resolve()): c for p, c in configured}, limiter=self._threads
        )
        for row in await run_blocking(state.folders, limiter=self._threads):
            if row.from_config and row.path not in named:
                await run_blocking(state.remove_folder, row.path, limiter=self._threads)
            elif named.get(row.path, row.corpus) != row.corpus:  # the config names another corpus:
                await run_blocking(state.forget_files, row.path, limiter=self._threads)  # all new there
        for path, corpus in named.items():
            await run_blocking(
                lambda p=path, c=corpus: state.add_folder(p, c, from_config=True), limiter=self._threads
            )
        for row in await run_blocking(state.folders, limiter=self._threads):
            self._begin(row.path, row.corpus)

    async def stop(self) -> None:
        if self._state is not None:
            await run_blocking(self._state.close, limiter=self._threads)

    async def run_background(self) -> None:
        assert self._state is not None
        async with anyio.create_task_group() as tg:
            self._tg = tg
            for path in list(self.watches):
                self._run(path)
            await anyio.sleep_forever()

    def registrations(self) -> list[Registration]:
        return [
            Registration(
                CapabilityDescriptor(WATCH, (1, 0), timeout_seconds=60.0, local_only=True), self._handle
            )
        ]

    def health(self) -> dict[str, Any]:
        return {"folders": len(self.watches)}

    def membership_changed(self) -> None:
        """A promotion may let a refused folder start: every folder runs a pass."""
        for watch in self.watches.values():
            if watch.label == "refused":
                watch.poke()

    def _begin(self, path: str, corpus: str) -> None:
        """A folder's watch, listed at once; it runs from :meth:`run_background` (or now, if running)."""
        assert self._state is not None
        self.watches[path] = FolderWatch(
            Path(path),
            corpus,
            state=self._state,
            writer=CorpusWriter(self._bus, corpus),
            threads=self._threads,
            settings=self._settings,
            may_write=self._check_trusted,
        )
        if self._tg is not None:
            self._run(path)

    def _run(self, path: str) -> None:
        assert self._tg is not None
        watch, scope = self.watches[path], anyio.CancelScope()
        self._scopes[path] = scope

        async def run() -> None:
            with scope:
                await watch.run()

        self._tg.start_soon(run)

    async def _check_trusted(self) -> None:
        own = await run_blocking(self._own_level, limiter=self._threads)
        if own is None:
            raise Unauthorized(
                f"node {self._node_id} is not a member of its community, so it may not watch folders "
                "('hearthnet status' says why)"
            )
        if own < Level.TRUSTED:
            raise Unauthorized(
                f"node {self._node_id} is only a {own.label} of its community, not trusted, so it may not "
                "watch folders (what it ingests is announced under its signature); an anchor can promote "
                f"it ('hearthnet member promote {self._node_id} --level trusted')"
            )

    # rag.watch ------------------------------------------------------------------------------------
    async def _handle(self, ctx: CallContext) -> dict[str, Any]:
        check_input_keys(ctx.input, {"action", "path", "corpus"}, WATCH)
        action = ctx.input.get("action", "list")
        if action not in ACTIONS:
            raise BadRequest(f"{WATCH} input.action must be one of {', '.join(ACTIONS)}, got {action!r}")
        if action == "list":
            return {"folders": await self._list()}
        value, add = ctx.input.get("path"), action == "add"
        path: str = await run_blocking(lambda: _folder_path(value, must_exist=add), limiter=self._threads)
        if action == "remove":
            return await self._remove(path)
        return await self._add(path, ctx.input.get("corpus"))

    async def _list(self) -> list[dict[str, Any]]:
        assert self._state is not None
        out = []
        rows = {r.path: r for r in await run_blocking(self._state.folders, limiter=self._threads)}
        for path, watch in sorted(self.watches.items()):
            files = await run_blocking(self._state.files, path, limiter=self._threads)
            entry = watch.summary(files)
            entry["from_config"] = bool(rows[path].from_config) if path in rows else False
            out.append(entry)
        return out

    async def _add(self, path: str, corpus_value: object) -> dict[str, Any]:
        assert self._state is not None
        corpus = validate_corpus_name(corpus_value)
        check_writable(corpus, is_local=True, what="documents")
        await self._check_trusted()
        if path in self.watches:
            has = self.watches[path].corpus
            if has == corpus:
                return {"path": path, "corpus": corpus, "added": False}
            raise BadRequest(
                f"folder {path} is watched into corpus {has} already: 'hearthnet watch remove' it first"
            )
        for other in self.watches:
            if _inside(path, other) or _inside(other, path):
                raise BadRequest(f"folder {path} overlaps the watched folder {other}: watch one of them only")
        if len(self.watches) >= MAX_FOLDERS:
            raise BadRequest(f"this node watches {MAX_FOLDERS} folders already: remove one first")
        state = self._state
        await run_blocking(lambda: state.add_folder(path, corpus, from_config=False), limiter=self._threads)
        self._begin(path, corpus)
        log.info("folder_watched", corpus=corpus)
        return {"path": path, "corpus": corpus, "added": True}

    async def _remove(self, path: str) -> dict[str, Any]:
        assert self._state is not None
        if path not in self.watches:
            raise NotFound(f"folder {path} is not watched ('hearthnet watch list' shows those that are)")
        rows = {r.path: r for r in await run_blocking(self._state.folders, limiter=self._threads)}
        if path in rows and rows[path].from_config:
            raise BadRequest(f"folder {path} is named in config.toml ([[rag.folders]]): remove it there")
        scope = self._scopes.pop(path, None)
        if scope is not None:
            scope.cancel()
        watch = self.watches.pop(path)
        await run_blocking(self._state.remove_folder, path, limiter=self._threads)
        return {"path": path, "corpus": watch.corpus, "removed": True}


def _folder_path(value: object, *, must_exist: bool) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{WATCH} input.path must be a folder's path on this node")
    shown = f"{value!r:.200}"
    try:
        path = Path(value).expanduser()
        if not path.is_absolute():
            raise BadRequest(
                f"folder path {shown} must be absolute (the node does not share your working folder)"
            )
        resolved = path.resolve()
        if must_exist and not resolved.is_dir():
            raise BadRequest(f"{shown} is not a folder on this node")
    except (OSError, RuntimeError, ValueError) as exc:  # too long, a symlink loop, a NUL byte
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise BadRequest(f"folder path {shown} cannot be opened on this node: {reason}") from None
    if must_exist and not os.access(resolved, os.R_OK | os.X_OK):
        raise BadRequest(f"folder {shown} cannot be read by the node (its permissions)")
    return str(resolved)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")

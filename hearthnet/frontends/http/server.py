"""The web UI front door: binds its port, serves the ASGI app with uvicorn in the node's process.

Listens on ``[ui] listen`` (default ``127.0.0.1:7780``).  With the default, a taken port moves
on to the next free one (``7780..7780+PORT_TRIES``), trying first the port this home used last,
so several nodes on one machine need no configuration and a restarted node comes back where
its open pages expect it.  A port named in the config (or ``HEARTHNET_UI_LISTEN``) that is
taken is an error naming it.  The URL goes to ``<home>/ui.json`` for ``hearthnet ui``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import structlog
import uvicorn

from hearthnet.bus.api import BusAPI
from hearthnet.config import UI_DEFAULT_PORT, NodeConfig
from hearthnet.errors import BadRequest, InternalError
from hearthnet.frontends.http import ask, document_view, files, library, mesh
from hearthnet.frontends.http.app import UiState, build_app
from hearthnet.frontends.http.asgi import ASGIApp
from hearthnet.frontends.http.connections import ConnectionTally, connection_limits, guarded_protocol
from hearthnet.frontends.http.jobs import Jobs
from hearthnet.frontends.http.last_resort import LastResort, any_door, any_shape
from hearthnet.frontends.http.live import EventWatcher, LiveHub
from hearthnet.frontends.http.nodebook import NodeBook
from hearthnet.frontends.http.policy import GatedBus
from hearthnet.frontends.http.programs import build_programs
from hearthnet.frontends.http.sessions import SessionCache
from hearthnet.frontends.http.standing import NodeStanding
from hearthnet.frontends.http.tokens import TokenStore
from hearthnet.runtime.process_settings import open_files_limit

__all__ = ["UiServer", "read_ui_state", "ui_url"]

log = structlog.get_logger("hearthnet.ui")

PORT_TRIES = 64
"""Ports after the default one tried before any free port is taken."""
SHUTDOWN_SECONDS = 2
"""How long open requests may take to finish when the node stops."""
UPLOADS = "ui-uploads"


def ui_url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def read_ui_state(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_ui_socket(host: str, port: int, *, explicit: bool, last: int | None) -> socket.socket:
    """The UI's listening socket (see the module's docstring for the choice of port)."""
    if explicit or port == 0:
        try:
            return _bind(host, port)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise BadRequest(
                    f"the web UI cannot listen on {host}:{port}: the port is taken "
                    "(change [ui] listen or HEARTHNET_UI_LISTEN, or stop what uses it)"
                ) from None
            raise BadRequest(f"the web UI cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    candidates = list(dict.fromkeys([*([last] if last else []), *range(port, port + PORT_TRIES), 0]))
    for candidate in candidates:
        try:
            return _bind(host, candidate)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise BadRequest(
                    f"the web UI cannot listen on {host}:{candidate}: {exc.strerror or exc}"
                ) from None
    raise BadRequest(f"the web UI found no free port on {host}")  # unreachable: port 0 is always free


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = anyio.Event()
        """Set once it accepts connections (or has given up)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """The node handles SIGINT/SIGTERM itself (and stops this server by cancellation)."""
        yield


class UiServer:
    """A front door of the node (started by ``node.py`` like the control socket)."""

    name = "ui"

    def __init__(self, config: NodeConfig, bus: BusAPI) -> None:
        self._config = config
        self._bus = GatedBus(bus)
        self.port = 0
        self.url = ""

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        cfg = self._config.ui
        home = self._config.home
        previous = await anyio.to_thread.run_sync(read_ui_state, self._config.ui_state_path)
        last = previous.get("port") if previous and not cfg.listen_explicit else None
        sock = bind_ui_socket(
            cfg.listen_host,
            cfg.listen_port,
            explicit=cfg.listen_explicit,
            last=last if isinstance(last, int) and cfg.listen_port == UI_DEFAULT_PORT else None,
        )
        self.port = sock.getsockname()[1]
        self.url = ui_url(cfg.listen_host, self.port)
        store = await anyio.to_thread.run_sync(TokenStore, self._config.ui_db_path)
        uploads = home / UPLOADS
        await anyio.to_thread.run_sync(_fresh_dir, uploads)
        hub = LiveHub()
        nodes = NodeBook(home / "ui-nodes.json")
        await anyio.to_thread.run_sync(nodes.load)
        state = UiState(
            bus=self._bus,
            sessions=SessionCache(store, NodeStanding(self._bus.bus)),
            hub=hub,
            watcher=EventWatcher(self._bus, hub),
            jobs=Jobs(self._bus, hub, uploads),
            nodes=nodes,
            config=cfg,
            node_name=self._config.name,
            port=lambda: self.port,
        )
        programs = build_programs(
            self._bus, store, cfg, self._config.name, state.closing, self._config.rag.embedding_model
        )
        server = _server(state, programs.app)
        try:
            async with anyio.create_task_group() as tg:
                state.jobs.attach(tg)
                tg.start_soon(state.watcher.run)
                await tg.start(programs.mcp.serve)

                async def serve() -> None:
                    try:
                        with anyio.CancelScope(shield=True):  # stopped by should_exit: a clean shutdown
                            await server.serve(sockets=[sock])
                    finally:
                        server.ready.set()

                tg.start_soon(serve)
                await server.ready.wait()
                if not server.started:
                    raise InternalError(f"the web UI could not start on {self.url}")
                await anyio.to_thread.run_sync(self._write_state)
                log.info("ui_started", url=self.url)
                task_status.started()
                try:
                    await anyio.sleep_forever()
                finally:
                    state.closing.set()
                    hub.close_all()
                    server.should_exit = True
                    tg.cancel_scope.cancel()  # the jobs and the watcher; serve() is shielded
        finally:
            sock.close()
            await anyio.to_thread.run_sync(store.close)

    def _write_state(self) -> None:
        path = self._config.ui_state_path
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"url": self.url, "port": self.port, "pid": os.getpid(), "started": time.time()}, f)
        os.replace(tmp, path)


def _server(state: UiState, programs: ASGIApp) -> _Server:
    """The uvicorn server of the UI's application (every route, its last resort, the programs'
    door), with the connection guard of ``[ui]``."""
    app = LastResort(
        build_app(
            state,
            [
                *library.routes(state),
                *mesh.routes(state),
                *ask.routes(state),
                *files.routes(state),
                *document_view.routes(state),
            ],
            programs,
        ),
        any_shape,
        any_door,
    )
    return _Server(
        uvicorn.Config(
            app,
            lifespan="off",
            access_log=False,
            log_config=None,
            server_header=False,
            timeout_graceful_shutdown=SHUTDOWN_SECONDS,
            timeout_keep_alive=30,
            h11_max_incomplete_event_size=64 * 1024,
            http=guarded_protocol(ConnectionTally(connection_limits(state.config, open_files_limit()))),
        )
    )


def _fresh_dir(path: Path) -> None:
    """The uploads folder, empty: what a stopped node left there was never imported."""
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
    path.mkdir(mode=0o700)

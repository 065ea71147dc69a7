"""The opt-in local model: llama-cpp-python's OpenAI-compatible server as a child process.

The node runs ``llama_cpp.server`` on 127.0.0.1 (a free port, a random API key
passed in its environment) and talks to it with the ``openai`` backend, so
inference never runs on the node's event loop and a crash of llama.cpp costs
one answer, not the node: a call that finds the child dead starts it again.
The child dies with the node (``PR_SET_PDEATHSIG`` on Linux, see
``local_child.py``).  Installed by ``make local-llm``.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import signal
import socket
import subprocess
import sys
from typing import Any

import anyio
import httpx
import structlog

from hearthnet.config.llm import LlmLocalConfig
from hearthnet.contracts.llm import ChatRequest
from hearthnet.errors import Partition, Timeout
from hearthnet.services.llm.openai_backend import ChatCompletion, OnDelta, OpenAIChatBackend

__all__ = ["LocalChatBackend", "LocalLlmConfig", "LocalUnavailable", "local_unavailable_reason"]

log = structlog.get_logger("hearthnet.llm.local")

RESTART_BACKOFF_SECONDS = 5.0
"""A child that died is started again at most this often (a model that crashes at load must not spin)."""


class LocalUnavailable(Exception):
    """The local model cannot be served (package or model file missing); the message says how to fix it."""


LocalLlmConfig = LlmLocalConfig
"""``[llm.local]`` as the backend takes it: the config's own class."""


def local_unavailable_reason(config: LocalLlmConfig) -> str | None:
    """Why the local model cannot run here (and what to do), or ``None`` if it can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed: run 'make local-llm' (it compiles llama.cpp, ~15 min)"
    if not config.model_file.is_file():
        return (
            f"the model file {config.model_path} does not exist: "
            "run 'make local-llm' or fix llm.local.model_path"
        )
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalChatBackend:
    """The child server plus an :class:`OpenAIChatBackend` that talks to it."""

    def __init__(self, config: LocalLlmConfig) -> None:
        reason = local_unavailable_reason(config)
        if reason is not None:
            raise LocalUnavailable(reason)
        self.config = config
        self.port = config.port or _free_port()
        self._key = secrets.token_urlsafe(24)
        inner = config.openai_config(self.port)
        self._backend = OpenAIChatBackend(inner, api_key=self._key)
        self.model = inner.model
        self.context_tokens = inner.context_tokens
        self.max_output_tokens = inner.max_output_tokens
        self.openai = inner
        self._process: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._started_at = -RESTART_BACKOFF_SECONDS
        self.restarts = 0
        self._lock = anyio.Lock()

    # the child ------------------------------------------------------------------------
    def start(self) -> None:
        """Start the child (called on the event loop's thread: the child dies with that thread)."""
        cfg = self.config
        args = [
            sys.executable,
            "-m",
            "hearthnet.services.llm.local_child",
            "--model",
            str(cfg.model_file),
            "--model_alias",
            cfg.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(cfg.context_tokens),
            "--interrupt_requests",
            "False",
            "--verbose",
            "False",  # llama.cpp's load and timing chatter; errors are still written
        ]
        if cfg.threads is not None:
            args += ["--n_threads", str(cfg.threads)]
        env = {**os.environ, "API_KEY": self._key, "HEARTHNET_PARENT_PID": str(os.getpid())}
        log_file: Any = subprocess.DEVNULL
        if cfg.log_path is not None:
            cfg.log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            log_file = open(cfg.log_path, "ab")  # handed to the child, closed below
        try:
            self._process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                env=env,
                start_new_session=True,
            )
        finally:
            if log_file is not subprocess.DEVNULL:
                log_file.close()
        self._ready = False
        self._started_at = anyio.current_time()
        log.info("llm_local_started", model=cfg.model, port=self.port, pid=self._process.pid)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    async def _ensure_ready(self, deadline: float) -> None:
        """Start the child again if it died, then wait until it answers ``/v1/models``."""
        async with self._lock:
            process = self._process
            if process is None or process.poll() is not None:
                code = process.returncode if process is not None else None
                wait = self._started_at + RESTART_BACKOFF_SECONDS - anyio.current_time()
                if wait > 0:
                    raise Partition(
                        f"the local model server exited (code {code}); it is started again in {wait:.1f} s",
                        retry_after_ms=int(wait * 1000) + 1,
                    )
                log.warning("llm_local_exited", model=self.model, code=code)
                self.restarts += 1
                self.start()
            if self._ready:
                return
            until = min(deadline, self._started_at + self.config.start_timeout_seconds)
            url = f"http://127.0.0.1:{self.port}/v1/models"
            headers = {"Authorization": f"Bearer {self._key}"}
            async with httpx.AsyncClient(timeout=2.0) as client:
                while anyio.current_time() < until:
                    child = self._process
                    if child is not None and child.poll() is not None:
                        raise Partition(
                            f"the local model server exited while starting (code {child.returncode}): "
                            f"see {self.config.log_path or 'its log'}"
                        )
                    try:
                        if (await client.get(url, headers=headers)).status_code == 200:
                            self._ready = True
                            log.info("llm_local_ready", model=self.model, port=self.port)
                            return
                    except httpx.HTTPError:
                        pass
                    await anyio.sleep(0.1)
            if anyio.current_time() >= self._started_at + self.config.start_timeout_seconds:
                raise Partition(
                    f"the local model server did not come up within {self.config.start_timeout_seconds:g} s"
                )
            raise Timeout("the call's deadline passed while the local model server was starting")

    # the backend protocol ------------------------------------------------------------
    async def chat(self, request: ChatRequest, *, max_tokens: int, on_delta: OnDelta) -> ChatCompletion:
        # the call's own deadline (the handler's cancel scope) bounds the wait for a starting child
        await self._ensure_ready(anyio.current_effective_deadline())
        return await self._backend.chat(request, max_tokens=max_tokens, on_delta=on_delta)

    def health(self) -> dict[str, Any]:
        return {"pid": self.pid, "port": self.port, "ready": self._ready, "restarts": self.restarts}

    async def aclose(self) -> None:
        await self._backend.aclose()
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            await anyio.to_thread.run_sync(process.wait, 10.0)
        except subprocess.TimeoutExpired:
            process.kill()
            await anyio.to_thread.run_sync(process.wait, 5.0)

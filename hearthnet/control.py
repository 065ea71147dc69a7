"""The local control channel: a Unix socket (mode 0600) inside the node's home.

Only the home's owner can open it.  Each connection carries one call::

    client -> {capability, version, params, input, timeout?, provider?, stream}
    server -> {t: "frame", data}*  then exactly one {t: "done", output, meta, provider}
                                   or {t: "error", error, message, retry_after_ms?}

The server performs the call through this node's bus as the node itself, so
local-only capabilities (``node.status``, ``community.invite`` ...) are
reachable here and nowhere else.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import structlog

from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.descriptors import parse_version
from hearthnet.control_protocol import CONTROL_MAX_FRAME, read_message, write_message
from hearthnet.errors import BadRequest, BusError, InternalError, ProtocolError
from hearthnet.wire.frames import FrameDecoder

log = structlog.get_logger("hearthnet.control")


class ControlServer:
    def __init__(self, path: Path, bus: CapabilityBus) -> None:
        self.path = path
        self._bus = bus

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()
        old_umask = os.umask(0o177)
        try:
            listener = await anyio.create_unix_listener(self.path)
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        task_status.started()
        try:
            async with listener:
                await listener.serve(self._handle)
        finally:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass

    async def _handle(self, stream: anyio.abc.ByteStream) -> None:
        async with stream:
            decoder = FrameDecoder(max_frame=CONTROL_MAX_FRAME)
            pending: list[bytes] = []
            try:
                request = await read_message(stream, decoder, pending)
            except (anyio.EndOfStream, anyio.BrokenResourceError, ProtocolError):
                return
            try:
                await self._serve(stream, request)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return  # the client went away

    async def _serve(self, stream: anyio.abc.ByteStream, request: dict[str, Any]) -> None:
        try:
            capability = request.get("capability")
            if not isinstance(capability, str):
                raise BadRequest("control request needs a capability")
            version = parse_version(str(request.get("version", "1.0")))
            params = request.get("params") or {}
            inp = request.get("input") or {}
            if not isinstance(params, dict) or not isinstance(inp, dict):
                raise BadRequest("params and input must be JSON objects")
            timeout = request.get("timeout")
            timeout_f = (
                float(timeout) if isinstance(timeout, int | float) and not isinstance(timeout, bool) else None
            )
            provider = request.get("provider")
            provider_s = provider if isinstance(provider, str) else None
            if request.get("stream"):
                async with self._bus.stream(
                    capability, version, params=params, input=inp, timeout=timeout_f, provider=provider_s
                ) as call:
                    await call.end_input()
                    async for frame in call.frames():
                        await write_message(stream, {"t": "frame", "data": frame})
                    result = await call.result()
            else:
                result = await self._bus.call(
                    capability, version, params=params, input=inp, timeout=timeout_f, provider=provider_s
                )
            await write_message(
                stream,
                {"t": "done", "output": result.output, "meta": result.meta, "provider": result.provider},
            )
        except BusError as exc:
            await write_message(stream, {"t": "error", **exc.to_wire()})
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise
        except Exception:
            log.exception("control_call_failed")
            await write_message(stream, {"t": "error", **InternalError("control call failed").to_wire()})

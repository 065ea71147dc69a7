"""One TCP connection opened and closed at once, to learn whether an address can be reached and,
if not, why: refused (nothing listens), dropped (no answer: a firewall) or unreachable (no route).
Used when a peer is asked to dial us back, and by ``hearthnet doctor`` (we dial ourselves)."""

from __future__ import annotations

import errno
import time
from typing import Any

import anyio

from hearthnet.errors import BadRequest

__all__ = ["PROBE_SECONDS", "dial"]

PROBE_SECONDS = 3.0
"""How long a probe waits for the connection: a LAN answers in milliseconds, and a dropped SYN
is sent again by the kernel after 1 s, so a port silent this long is blocked or gone."""

_UNREACHABLE = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.EADDRNOTAVAIL}


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadRequest(f"not a host:port address: {address[:100]!r}")
    return host.strip("[]"), int(port)


async def dial(address: str, timeout: float = PROBE_SECONDS) -> dict[str, Any]:
    """Open and close one TCP connection to ``address``: ``{address, reachable, reason, ms,
    message}`` with ``reason`` ``ok``, ``timeout`` (no answer: dropped), ``refused`` (nothing
    listens) or ``unreachable`` (no route, host down)."""
    host, port = _split(address)
    start = time.perf_counter()

    def result(reason: str, message: str) -> dict[str, Any]:
        ms = round((time.perf_counter() - start) * 1000, 1)
        return {
            "address": address,
            "reachable": reason == "ok",
            "reason": reason,
            "ms": ms,
            "message": message,
        }

    try:
        with anyio.fail_after(timeout):
            stream = await anyio.connect_tcp(host, port)
    except TimeoutError:
        return result("timeout", f"no answer within {timeout:g} s (the packets are dropped)")
    except OSError as exc:
        cause = _first_os_error(exc)
        if cause.errno == errno.ECONNREFUSED:
            return result("refused", "connection refused (nothing listens there)")
        reason = "unreachable" if cause.errno in _UNREACHABLE else "error"
        return result(reason, cause.strerror or str(cause) or type(cause).__name__)
    await stream.aclose()
    return result("ok", "connected")


def _first_os_error(exc: OSError) -> OSError:
    """The OS's own error: anyio reports "all connection attempts failed" with each as its cause."""
    cause = exc.__cause__
    if isinstance(cause, BaseExceptionGroup):
        found = [e for e in cause.exceptions if isinstance(e, OSError) and e.errno is not None]
        if found:
            return found[0]
    return cause if isinstance(cause, OSError) and cause.errno is not None else exc

"""Server-sent events: bytes in, the ``data`` of each complete event out (pure, bounded).

Only what OpenAI-compatible servers use: ``data:`` lines (several join with a
newline), comments (``:``) and other fields ignored, a blank line ends an event.
A line longer than ``max_line`` bytes is a malformed stream, never an allocation
without bound.
"""

from __future__ import annotations

from hearthnet.errors import InternalError

__all__ = ["MAX_LINE", "SSEDecoder"]

MAX_LINE = 1 << 20


class SSEDecoder:
    """Feed it chunks as they arrive; it returns the events they complete."""

    def __init__(self, *, max_line: int = MAX_LINE) -> None:
        self._max_line = max_line
        self._buffer = bytearray()
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        events: list[str] = []
        while True:
            end = self._line_end()
            if end is None:
                if len(self._buffer) > self._max_line:
                    raise InternalError(f"the server sent a stream line over {self._max_line} bytes")
                return events
            cut, skip = end
            raw = bytes(self._buffer[:cut])
            del self._buffer[: cut + skip]
            event = self._line(raw)
            if event is not None:
                events.append(event)

    def _line_end(self) -> tuple[int, int] | None:
        """Where the first line ends and how long its terminator is (CRLF, LF or CR)."""
        lf, cr = self._buffer.find(b"\n"), self._buffer.find(b"\r")
        if cr == -1 or (lf != -1 and lf < cr):
            return None if lf == -1 else (lf, 1)
        if cr + 1 == len(self._buffer):
            return None  # a CR at the end may be the first half of a CRLF
        return cr, 2 if self._buffer[cr + 1] == 0x0A else 1

    def _line(self, raw: bytes) -> str | None:
        if not raw:  # blank line: the event is complete
            if not self._data:
                return None
            data, self._data = "\n".join(self._data), []
            return data
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InternalError("the server sent a stream line that is not UTF-8") from exc
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def close(self) -> list[str]:
        """The stream ended: an event not yet ended by a blank line still counts."""
        events = self.feed(b"\n\n") if self._buffer or self._data else []
        return events

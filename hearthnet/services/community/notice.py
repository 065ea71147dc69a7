"""This node's own revocation, as its log holds it or as a refusing peer showed it.

A revoked node is cut off at once, usually before gossip brings it the revocation.
The peer refusing its next handshake shows it the signed event; the node checks it
(:func:`hearthnet.community.revocation.own_revocation`) and stores it in its log, or,
when the log cannot take it yet (it lacks the author's earlier events), keeps it in
``revoked.json`` in the home, checked again at every start.  Blocking: call it in a
worker thread.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import structlog

from hearthnet.community.membership import Membership, Revocation
from hearthnet.community.revocation import own_revocation
from hearthnet.errors import BusError
from hearthnet.events.envelope import Event
from hearthnet.events.log import EventLog

log = structlog.get_logger("hearthnet.community")

__all__ = ["OwnRevocation"]


class OwnRevocation:
    """Where this node reads whether (by whom, when) it was revoked."""

    def __init__(self, node_id: str, event_log: EventLog[Membership], path: Path | None) -> None:
        self._node_id = node_id
        self._log = event_log
        self._path = path
        self._shown: Revocation | None = None

    def current(self) -> Revocation | None:
        """The log's revocation of this node when it holds one, else the one a peer showed."""
        if self._log.community_id is None:
            return None
        return self._log.view(lambda m: m.revocation(self._node_id)) or self._shown

    def learn(self, event: Event) -> bool:
        """Keep ``event`` (signature checked) if it revokes this node; True if that is news.

        ``BadRequest``/``Unauthorized`` if it cannot be this node's revocation.
        """
        if self.current() is not None:
            return False
        shown = own_revocation(event, self._node_id, self._log.membership())
        self._log.ingest([event])  # stored when it continues its author's events held here
        if self._log.view(lambda m: m.is_revoked(self._node_id)):
            return True
        if self._path is not None:
            _write_json(self._path, {"event": {k: _b64(v) for k, v in event.to_wire().items()}})
        self._shown = shown
        return True

    def load(self) -> None:
        """Read ``revoked.json`` if a peer showed this node its revocation before a restart."""
        if self._path is None or self._log.community_id is None or not self._path.exists():
            return
        try:
            saved = json.loads(self._path.read_text(encoding="utf-8"))
            wire = {k: base64.b64decode(saved["event"][k], validate=True) for k in ("body", "sig")}
            self._shown = own_revocation(Event.from_wire(wire), self._node_id, self._log.membership())
        except BusError as exc:
            log.warning("revocation_notice_ignored", path=str(self._path), code=exc.code)
        except (OSError, ValueError, TypeError, KeyError):
            log.warning("revocation_notice_unreadable", path=str(self._path))


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _write_json(path: Path, document: dict[str, object]) -> None:
    """``document`` to ``path`` whole or not at all (temporary file, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            json.dump(document, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)

"""Conversation sessions in the node's home (``answer.sqlite3``): turns a follow-up question sees.

A session is created by its first turn, under an id the caller chooses
(``[A-Za-z0-9][A-Za-z0-9_.-]{0,63}``); its title is the first question until
renamed.  Each session keeps its last ``max_turns`` turns, and the store its
``max_sessions`` most recently used sessions.  Blocking: the service calls it
from one worker thread at a time.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hearthnet.answer.attachments import ATTACHMENT_SCHEMA, attachments_of
from hearthnet.answer.prompt import Turn
from hearthnet.errors import BadRequest, NotFound
from hearthnet.runtime.sqlite_tx import transaction

__all__ = ["MAX_TITLE", "SessionStore", "validate_session_id", "validate_title"]

MAX_TITLE = 200
T = TypeVar("T")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    question TEXT NOT NULL,
    answer TEXT NOT NULL,
    cited TEXT NOT NULL,
    mode TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX IF NOT EXISTS sessions_by_use ON sessions (updated_ms);
"""


def validate_session_id(value: object) -> str:
    if not isinstance(value, str) or _ID.fullmatch(value) is None:
        raise BadRequest(
            "a session id is 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
        )
    return value


def validate_title(value: object) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TITLE:
        raise BadRequest(f"a session title is a non-empty string of at most {MAX_TITLE} characters")
    return " ".join(value.split())


def _now_ms() -> int:
    return int(time.time() * 1000)


class SessionStore:
    def __init__(self, path: Path, *, max_sessions: int, max_turns: int) -> None:
        self._max_sessions = max_sessions
        self._max_turns = max_turns
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA secure_delete=ON")  # a deleted chat's documents leave no trace in the file
        self._db.executescript(_SCHEMA + ATTACHMENT_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(turns)")}
        if "sources" not in columns:  # a store from before turns kept their sources
            self._db.execute("ALTER TABLE turns ADD COLUMN sources TEXT NOT NULL DEFAULT '[]'")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` on the database under the store's lock (the attachments' tables live here too)."""
        with self._lock:
            return fn(self._db)

    def history(self, session: str, *, turns: int) -> list[Turn]:
        """The last ``turns`` turns of ``session``, oldest first (none if it does not exist yet)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT question, answer FROM turns WHERE session_id = ? ORDER BY seq DESC LIMIT ?",
                (session, turns),
            ).fetchall()
        return [Turn(q, a) for q, a in reversed(rows)]

    def append(
        self,
        session: str,
        *,
        question: str,
        answer: str,
        cited: list[str],
        mode: str,
        sources: list[dict[str, Any]] | None = None,
    ) -> int:
        """Record a turn (creating the session); returns the session's turn count.  ``sources``:
        the passages the answer cited (or the nearest, for an abstained one), as shown again."""
        now = _now_ms()
        with self._lock, transaction(self._db):
            title = " ".join(question.split())[:MAX_TITLE] or session
            self._db.execute(
                "INSERT INTO sessions (id, title, created_ms, updated_ms) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET updated_ms = excluded.updated_ms, title = CASE WHEN "
                "EXISTS (SELECT 1 FROM turns WHERE session_id = excluded.id) THEN sessions.title "
                "ELSE excluded.title END",  # made by an attachment: its first question names it
                (session, title, now, now),
            )
            (last,) = self._db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM turns WHERE session_id = ?", (session,)
            ).fetchone()
            self._db.execute(
                "INSERT INTO turns (session_id, seq, question, answer, cited, mode, created_ms, sources) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session,
                    last + 1,
                    question,
                    answer,
                    json.dumps(cited),
                    mode,
                    now,
                    json.dumps(sources or []),
                ),
            )
            self._db.execute(
                "DELETE FROM turns WHERE session_id = ? AND seq <= ?", (session, last + 1 - self._max_turns)
            )
            self._db.execute(
                "DELETE FROM sessions WHERE id IN (SELECT id FROM sessions ORDER BY updated_ms DESC, id "
                "LIMIT -1 OFFSET ?)",
                (self._max_sessions,),
            )
            (count,) = self._db.execute(
                "SELECT COUNT(*) FROM turns WHERE session_id = ?", (session,)
            ).fetchone()
        return int(count)

    def sessions(self, *, limit: int) -> list[dict[str, Any]]:
        """Sessions, most recently used first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT s.id, s.title, s.created_ms, s.updated_ms, "
                "(SELECT COUNT(*) FROM turns t WHERE t.session_id = s.id) "
                "FROM sessions s ORDER BY s.updated_ms DESC, s.id LIMIT ?",
                (limit,),
            ).fetchall()
        return [{"id": i, "title": t, "created_ms": c, "updated_ms": u, "turns": n} for i, t, c, u, n in rows]

    def get(self, session: str) -> dict[str, Any]:
        """A session with all its kept turns, oldest first."""
        with self._lock:
            row = self._db.execute(
                "SELECT title, created_ms, updated_ms FROM sessions WHERE id = ?", (session,)
            ).fetchone()
            if row is None:
                raise NotFound(f"no session {session}")
            turns = self._db.execute(
                "SELECT seq, question, answer, cited, mode, created_ms, sources FROM turns "
                "WHERE session_id = ? ORDER BY seq",
                (session,),
            ).fetchall()
            attached = attachments_of(self._db, session)
        return {
            "id": session,
            "title": row[0],
            "created_ms": row[1],
            "updated_ms": row[2],
            "turns": [
                {
                    "seq": s,
                    "question": q,
                    "answer": a,
                    "cited": json.loads(c),
                    "mode": m,
                    "created_ms": t,
                    "sources": json.loads(src),
                }
                for s, q, a, c, m, t, src in turns
            ],
            "attachments": attached,
        }

    def rename(self, session: str, title: str) -> None:
        with self._lock, transaction(self._db):
            if self._db.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, session)).rowcount == 0:
                raise NotFound(f"no session {session}")

    def delete(self, session: str) -> None:
        with self._lock, transaction(self._db):
            if self._db.execute("DELETE FROM sessions WHERE id = ?", (session,)).rowcount == 0:
                raise NotFound(f"no session {session}")

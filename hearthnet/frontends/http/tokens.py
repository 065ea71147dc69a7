"""Login tokens and browser sessions of the node's HTTP front doors, in ``<home>/ui.sqlite3``.

A token is a secret a person holds (a login link, later an ``Authorization: Bearer`` key of the
OpenAI-compatible gateway).  Only its SHA-256 is stored, with a name, a level, when it was
created and last used.  Two kinds:

- **owner links** (``hearthnet ui``): level anchor, one use, valid ``OWNER_LINK_SECONDS``
  until used; only the node's owner (who can read the home) can make one.
- **person tokens** (``hearthnet ui token create``): member or trusted, reusable until revoked.

Redeeming a token opens a *session* (a random cookie value, also stored hashed) that carries
the token's level and a CSRF token; revoking a token ends its sessions.  The file is shared by
the CLI (which writes tokens directly, whether or not the node runs) and the node: all methods
are blocking and thread-safe; the node calls them off the event loop.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from hearthnet.community.levels import Level
from hearthnet.errors import BadRequest, NotFound
from hearthnet.runtime.sqlite_tx import transaction

__all__ = [
    "OWNER_LINK_SECONDS",
    "SESSION_SECONDS",
    "Session",
    "TokenInfo",
    "TokenStore",
]

OWNER_LINK_SECONDS = 15 * 60
"""How long an owner's one-time login link stays valid if nobody uses it."""
SESSION_SECONDS = 30 * 24 * 3600
"""How long a browser stays signed in after using a link."""
TOKEN_PREFIX = "hn_"
MAX_NAME = 64
PERSON_LEVELS = (Level.MEMBER, Level.TRUSTED)
"""Levels a person's token may carry: only the node's owner acts as anchor."""
OWNER_NAME = "owner"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    level TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    one_time INTEGER NOT NULL,
    created REAL NOT NULL,
    expires REAL,
    used REAL,
    last_used REAL,
    revoked REAL
);
CREATE TABLE IF NOT EXISTS sessions (
    hash TEXT PRIMARY KEY,
    token_id TEXT NOT NULL REFERENCES tokens(id),
    level TEXT NOT NULL,
    csrf TEXT NOT NULL,
    created REAL NOT NULL,
    expires REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_token ON sessions(token_id);
"""


def digest(secret: str) -> str:
    """The stored form of a token or session secret (both are 256-bit random: no slow hash needed)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TokenInfo:
    id: str
    name: str
    level: Level
    one_time: bool
    created: float
    expires: float | None
    used: float | None
    last_used: float | None
    revoked: float | None

    @property
    def owner(self) -> bool:
        """An owner link (``hearthnet ui``): the only kind that acts as anchor."""
        return self.one_time

    def spent(self, now: float) -> bool:
        """An owner link used already or expired: it signs nobody in any more (a used one is kept
        only while a browser it signed in has a live session, which revoking it ends)."""
        return self.one_time and (self.used is not None or (self.expires is not None and self.expires < now))

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "level": self.level.label,
            "kind": "owner-link" if self.one_time else "person",
            "created": self.created,
            "expires": self.expires,
            "used": self.used,
            "last_used": self.last_used,
            "revoked": self.revoked,
        }


@dataclass(frozen=True)
class Session:
    """A signed-in browser: the token it came from, its level and its CSRF token."""

    key: str
    """The hash of the cookie value (the cookie value itself is never stored)."""
    token_id: str
    name: str
    level: Level
    owner: bool
    csrf: str
    expires: float
    revoked: str | None = None
    """Set when this node was revoked from its community (why nothing reaches it any more)."""


def check_name(name: str) -> str:
    text = name.strip()
    if not text or len(text) > MAX_NAME or not text.isprintable():
        raise BadRequest(f"a token name is 1..{MAX_NAME} printable characters")
    return text


class TokenStore:
    """The SQLite file of tokens and sessions (mode 0600)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
        with self._lock:
            self._db.execute("PRAGMA foreign_keys = ON")
            # A rollback journal: the file change counter in the header then moves on every commit.
            self._db.execute("PRAGMA journal_mode = DELETE")
            self._db.executescript(_SCHEMA)
        self._fd = os.open(path, os.O_RDONLY)

    def close(self) -> None:
        with self._lock:
            self._db.close()
            os.close(self._fd)

    def change_counter(self) -> bytes:
        """SQLite's file change counter (header bytes 24-27): it moves on every committed write,
        by this process or another (the CLI), so a cache knows when to read again."""
        return os.pread(self._fd, 4, 24)

    # tokens ---------------------------------------------------------------------------
    def create(self, name: str, level: Level, *, owner: bool = False) -> tuple[TokenInfo, str]:
        """A new token and its secret (shown once; only its hash is kept)."""
        name = check_name(name)
        if not owner and level not in PERSON_LEVELS:
            raise BadRequest("a person's token is member or trusted: only the node's owner acts as anchor")
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = time.time()
        token_id = "tok_" + secrets.token_hex(4)
        expires = now + OWNER_LINK_SECONDS if owner else None
        with self._lock, transaction(self._db):
            if (
                not owner
                and self._db.execute(
                    "SELECT 1 FROM tokens WHERE name = ? AND one_time = 0 AND revoked IS NULL", (name,)
                ).fetchone()
            ):
                raise BadRequest(f"a token named {name!r} exists: revoke it first or choose another name")
            self._forget_stale_owner_links(now)
            self._db.execute(
                "INSERT INTO tokens (id, name, level, hash, one_time, created, expires) "
                "VALUES (?,?,?,?,?,?,?)",
                (token_id, name, level.label, digest(secret), int(owner), now, expires),
            )
        return self._get(token_id), secret

    def prune(self) -> None:
        """Drop ended sessions and the owner links nobody can use any more (see below)."""
        with self._lock, transaction(self._db):
            self._forget_stale_owner_links(time.time())

    def _forget_stale_owner_links(self, now: float) -> None:
        """Owner links never used and expired, or whose sessions have all ended, are dropped."""
        self._db.execute("DELETE FROM sessions WHERE expires < ?", (now,))
        self._db.execute(
            "DELETE FROM tokens WHERE one_time = 1 AND ((used IS NULL AND expires < ?) OR "
            "(used IS NOT NULL AND id NOT IN (SELECT token_id FROM sessions)))",
            (now,),
        )

    def list(self) -> list[TokenInfo]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_TOKEN_COLUMNS} FROM tokens ORDER BY created").fetchall()
        return [_token(r) for r in rows]

    def _get(self, token_id: str) -> TokenInfo:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_TOKEN_COLUMNS} FROM tokens WHERE id = ?", (token_id,)
            ).fetchone()
        if row is None:
            raise NotFound(f"no token {token_id}")
        return _token(row)

    def revoke(self, which: str) -> TokenInfo:
        """Revoke the token with this id (or this name) and end its sessions."""
        if (
            not which.isprintable() or len(which) > MAX_NAME
        ):  # no name or id is: a lone surrogate never reaches SQLite
            raise NotFound(f"no active token with id or name {which[:64]!r} (see 'hearthnet ui token list')")
        now = time.time()
        with self._lock, transaction(self._db):
            rows = self._db.execute(
                "SELECT id FROM tokens WHERE (id = ? OR name = ?) AND revoked IS NULL", (which, which)
            ).fetchall()
            if not rows:
                raise NotFound(f"no active token with id or name {which!r} (see 'hearthnet ui token list')")
            if len(rows) > 1:
                raise BadRequest(f"{len(rows)} active tokens are named {which!r}: revoke one by its id")
            token_id = rows[0][0]
            self._db.execute("UPDATE tokens SET revoked = ? WHERE id = ?", (now, token_id))
            self._db.execute("DELETE FROM sessions WHERE token_id = ?", (token_id,))
        return self._get(token_id)

    # sessions -------------------------------------------------------------------------
    def redeem(self, secret: str) -> tuple[Session, str] | None:
        """Exchange a login token for a new session and its cookie value; ``None`` if the token
        is unknown, revoked, expired, or an owner link already used."""
        now = time.time()
        cookie = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(24)
        with self._lock, transaction(self._db):
            row = self._db.execute(
                f"SELECT {_TOKEN_COLUMNS} FROM tokens WHERE hash = ?", (digest(secret),)
            ).fetchone()
            if row is None:
                return None
            token = _token(row)
            if not _usable(token, now):
                return None
            self._db.execute("UPDATE tokens SET used = ?, last_used = ? WHERE id = ?", (now, now, token.id))
            expires = now + SESSION_SECONDS
            self._db.execute(
                "INSERT INTO sessions (hash, token_id, level, csrf, created, expires) VALUES (?,?,?,?,?,?)",
                (digest(cookie), token.id, token.level.label, csrf, now, expires),
            )
        session = Session(digest(cookie), token.id, token.name, token.level, token.owner, csrf, expires)
        return session, cookie

    def peek(self, secret: str) -> TokenInfo | None:
        """The token a login secret names, if it would sign someone in now (nothing is used)."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {_TOKEN_COLUMNS} FROM tokens WHERE hash = ?", (digest(secret),)
            ).fetchone()
        token = None if row is None else _token(row)
        return token if token is not None and _usable(token, time.time()) else None

    def sessions(self) -> dict[str, Session]:
        """Every live session by the hash of its cookie (the server keeps them in memory)."""
        now = time.time()
        with self._lock:
            rows = self._db.execute(
                "SELECT s.hash, s.token_id, t.name, s.level, t.one_time, s.csrf, s.expires "
                "FROM sessions s JOIN tokens t ON t.id = s.token_id "
                "WHERE s.expires >= ? AND t.revoked IS NULL",
                (now,),
            ).fetchall()
        return {r[0]: Session(r[0], r[1], r[2], Level.parse(r[3]), bool(r[4]), r[5], r[6]) for r in rows}

    def bearer_tokens(self) -> dict[str, TokenInfo]:
        """Every token usable as an ``Authorization: Bearer`` key, by its hash: the person tokens
        not revoked (an owner link works once, in a browser, and never as a key)."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_TOKEN_COLUMNS}, hash FROM tokens WHERE one_time = 0 AND revoked IS NULL"
            ).fetchall()
        return {str(r[-1]): _token(r[:-1]) for r in rows}

    def end_session(self, key: str) -> None:
        with self._lock, transaction(self._db):
            self._db.execute("DELETE FROM sessions WHERE hash = ?", (key,))

    def touch(self, token_id: str) -> None:
        """Record that a token's session was used now (the caller throttles this)."""
        with self._lock, transaction(self._db):
            self._db.execute("UPDATE tokens SET last_used = ? WHERE id = ?", (time.time(), token_id))


def _usable(token: TokenInfo, now: float) -> bool:
    """Whether ``token`` signs someone in now: not revoked, not expired, not a used owner link."""
    if token.revoked is not None or (token.expires is not None and token.expires < now):
        return False
    return not (token.one_time and token.used is not None)


_TOKEN_COLUMNS = "id, name, level, one_time, created, expires, used, last_used, revoked"


def _token(row: tuple[object, ...]) -> TokenInfo:
    return TokenInfo(
        id=str(row[0]),
        name=str(row[1]),
        level=Level.parse(str(row[2])),
        one_time=bool(row[3]),
        created=float(row[4]),  # type: ignore[arg-type]
        expires=None if row[5] is None else float(row[5]),  # type: ignore[arg-type]
        used=None if row[6] is None else float(row[6]),  # type: ignore[arg-type]
        last_used=None if row[7] is None else float(row[7]),  # type: ignore[arg-type]
        revoked=None if row[8] is None else float(row[8]),  # type: ignore[arg-type]
    )

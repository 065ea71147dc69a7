"""Anti-entropy by per-author sequence numbers (pure; no networking).

Every author numbers its own events 1, 2, 3, ...  A node's *version vector*
maps each author to the highest sequence number up to which it holds every
event of that author.  Comparing two vectors says exactly which events a peer
lacks, whatever the interleaving of writers; "send what is above the peer's
highest Lamport time" would not (it loses concurrent writes).

The node's sync loop is :func:`pull`: send my vector, ingest the batch the peer
returns, repeat until the peer has nothing more or a batch brings no progress.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hearthnet.errors import BadRequest
from hearthnet.events.envelope import MAX_LAMPORT, Event

__all__ = [
    "DEFAULT_BATCH",
    "MAX_BATCH",
    "MAX_VV_ENTRIES",
    "PullResult",
    "lacking",
    "parse_version_vector",
    "pull",
    "refused_authors",
    "with_skipped",
]

DEFAULT_BATCH = 500
MAX_BATCH = 2000
MAX_VV_ENTRIES = 100_000


def lacking(local_vv: Mapping[str, int], remote_vv: Mapping[str, int]) -> dict[str, int]:
    """Author -> first sequence number the remote lacks, for authors where local is ahead."""
    out: dict[str, int] = {}
    for author, local_seq in local_vv.items():
        remote_seq = remote_vv.get(author, 0)
        if local_seq > remote_seq:
            out[author] = remote_seq + 1
    return out


def parse_version_vector(obj: Any) -> dict[str, int]:
    """Validate a version vector received from a peer; raise ``BadRequest``."""
    if not isinstance(obj, Mapping):
        raise BadRequest("a version vector is a map author -> seq")
    if len(obj) > MAX_VV_ENTRIES:
        raise BadRequest(f"a version vector has at most {MAX_VV_ENTRIES} entries")
    out: dict[str, int] = {}
    for author, seq in obj.items():
        if not isinstance(author, str) or len(author) > 128:
            raise BadRequest("version vector keys are node ids")
        if type(seq) is not int or not 0 <= seq <= MAX_LAMPORT:
            raise BadRequest("version vector values are non-negative integers")
        out[author] = seq
    return out


class _Report(Protocol):
    @property
    def accepted(self) -> Sequence[Event]: ...

    @property
    def rejected(self) -> Sequence[tuple[str, str, str]]: ...


class _Sink(Protocol):
    def version_vector(self) -> dict[str, int]: ...

    def ingest(self, events: Sequence[Event]) -> _Report: ...


@dataclass(frozen=True)
class PullResult:
    accepted: int
    rounds: int


def pull(
    sink: _Sink,
    fetch: Callable[[dict[str, int]], Sequence[Event]],
    *,
    max_rounds: int = 10_000,
) -> PullResult:
    """Pull everything ``fetch`` (the peer's ``missing_for``) has that ``sink`` lacks.

    Stops when a batch is empty or brings nothing new.  An author whose events
    we refuse (an equivocation, rules that differ) is then asked for no more
    in this pull (:func:`refused_authors`), so its refused events cannot fill
    every batch and hide what other authors wrote; without progress and
    without a newly refused author, it stops (no loop on a refused event).
    """
    accepted = 0
    rounds = 0
    skip: set[str] = set()
    while rounds < max_rounds:
        batch = fetch(with_skipped(sink.version_vector(), skip))
        rounds += 1
        if not batch:
            break
        report = sink.ingest(batch)
        accepted += len(report.accepted)
        new = refused_authors(batch, report) - skip
        skip |= new
        if not report.accepted and not new:
            break
    return PullResult(accepted=accepted, rounds=rounds)


def with_skipped(vv: dict[str, int], skip: set[str]) -> dict[str, int]:
    """``vv`` claiming to hold everything of the authors in ``skip`` (so a peer sends none of theirs)."""
    for author in skip:
        vv[author] = MAX_LAMPORT
    return vv


def refused_authors(batch: Sequence[Event], report: _Report) -> set[str]:
    """Authors with an event refused in ``report`` and none accepted."""
    author_of = {e.event_id: e.author for e in batch}
    took = {e.author for e in report.accepted}
    return {author_of[i] for i, _code, _reason in report.rejected if i in author_of} - took

"""``rag.query`` filters: validation, evaluation in Python, and the clause given to ChromaDB.

Pure functions, no I/O.  :func:`build_where` validates a caller's filter and
returns a canonical clause; :func:`where_matches` evaluates that clause on one
chunk's metadata and is the meaning of a filter on every query path (exact
in-memory search, the over-fetch path, and as a check on ChromaDB's answers).

Semantics: values compare by type — a boolean equals only a boolean, a string
only a string, numbers by value (``1 == 1.0``).  Range operators take a number,
compared with numbers, or an ISO 8601 date or date-time string, compared as a
moment in time with metadata strings that are dates or date-times themselves
(``--meta timestamp:date=2024-03-12``): a date-time without an offset is UTC,
a date is its whole day — ``$gte``/``$lt`` a date from its first moment,
``$gt``/``$lte`` a date up to its last, so ``{"$gte": "2024-03-01", "$lte":
"2024-03-31"}`` is all of March whether the metadata holds dates or
date-times.  ``$ne`` and ``$nin`` also match a chunk that lacks the key; every
other operator needs it.

ChromaDB (1.5) compares no strings by range: a date condition goes to it as no
constraint, and the store keeps only the hits :func:`where_matches` accepts.
It differs in one more way: against an integer field it truncates a
non-integer operand (``page < 2.5`` acts as ``page < 2``).  :func:`chroma_where`
therefore widens such comparisons (``page < 3``, ...) into a clause that
matches at least every chunk the filter matches, and the store keeps only the
hits :func:`where_matches` accepts.  It also splits ``$in``/``$nin`` lists of
mixed types, which ChromaDB refuses.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from hearthnet.errors import BadRequest
from hearthnet.services.rag.chunks import METADATA_KEY

__all__ = [
    "MAX_FILTER_CONDITIONS",
    "MAX_FILTER_DEPTH",
    "MAX_IN_VALUES",
    "build_where",
    "chroma_where",
    "compile_where",
    "filter_keys",
    "where_matches",
]

MAX_IN_VALUES = 1000
"""``$in``/``$nin`` values in one filter, all lists together."""
MAX_FILTER_DEPTH = 8
"""Nesting of ``$and``/``$or`` a filter may use."""
MAX_FILTER_CONDITIONS = 16
"""Conditions (``key: {op: value}``) in one filter (an exact search evaluates them on every
chunk it passes; its cost is measured in ``specs/rag.md``)."""
_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin"})
_RANGE_OPERATORS = frozenset({"$gt", "$gte", "$lt", "$lte"})
_INT64 = 1 << 63


def _scalar(key: str, value: Any) -> Any:
    """A filter operand: bool, 64-bit int, finite float (``2.0`` becomes ``2``) or string."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise BadRequest(f"filter value for {key!r} is out of range (64-bit integers only)")
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value) if value.is_integer() and -_INT64 <= value < _INT64 else value
    raise BadRequest(f"filter value for {key!r} must be a string, number or boolean")


def _condition(key: Any, cond: Any, budget: list[int]) -> dict[str, Any]:
    if not isinstance(key, str) or METADATA_KEY.fullmatch(key) is None or key.startswith("hn_"):
        raise BadRequest(
            f"filter key {str(key)[:70]!r} is not supported: use a metadata field such as doc_cid or page"
        )
    if key == "chunk_id":  # an id, not stored metadata: a filter on it would silently match nothing
        raise BadRequest("chunk_id cannot be filtered on: filter on doc_cid with chunk_index or page instead")
    if not isinstance(cond, Mapping):
        return {key: {"$eq": _scalar(key, cond)}}
    if not cond:
        raise BadRequest(f'filter for {key!r} has no operator: use e.g. {{"{key[:40]}": {{"$eq": value}}}}')
    if len(cond) != 1:
        parts = list(cond.items())[:2]
        example = ", ".join(
            json.dumps({key[:40]: {str(op)[:20]: value}}, default=lambda _: "...")[:120]
            for op, value in parts
        )
        raise BadRequest(
            f"filter for {key!r} must have exactly one operator; to combine conditions on one field, "
            f'list them under $and: {{"$and": [{example}]}}'
        )
    ((op, value),) = cond.items()
    if op not in _OPERATORS:
        raise BadRequest(
            f"filter operator {str(op)[:20]!r} is not supported: use one of {', '.join(sorted(_OPERATORS))}"
        )
    if op in ("$in", "$nin"):
        if not isinstance(value, list | tuple) or not value or len(value) > MAX_IN_VALUES:
            raise BadRequest(f"{op} for {key!r} needs a list of 1-{MAX_IN_VALUES} values")
        budget[1] -= len(value)
        if budget[1] < 0:
            raise BadRequest(f"filter has more than {MAX_IN_VALUES} $in/$nin values in all")
        return {key: {op: [_scalar(key, v) for v in value]}}
    value = _scalar(key, value)
    if op in _RANGE_OPERATORS:
        if isinstance(value, str):
            if _moment(value) is None:
                raise BadRequest(
                    f"{op} for {key!r} needs a number or an ISO 8601 date or date-time "
                    f"(e.g. 2024-03-12 or 2024-03-12T09:30:00), not {value[:40]!r}"
                )
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise BadRequest(f"{op} for {key!r} needs a number or an ISO 8601 date")
    return {key: {op: value}}


_UTC = dt.UTC


@functools.lru_cache(maxsize=65536)
def _moment(text: str) -> tuple[float, bool] | None:
    """An ISO 8601 date or date-time as ``(seconds since the epoch, is a date)``, UTC unless it
    says its offset; ``None`` if ``text`` is neither."""
    if not 10 <= len(text) <= 40 or not text[:4].isdigit() or text[4:5] != "-":
        return None
    try:
        if len(text) == 10:
            day = dt.date.fromisoformat(text)
            return dt.datetime(day.year, day.month, day.day, tzinfo=_UTC).timestamp(), True
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_UTC)
    return moment.timestamp(), False


def _date_test(op: str, text: str) -> Callable[[float], bool]:
    """The range condition ``op text`` on a moment (:func:`_moment`): a date operand is its whole
    day (its last moment is the next day's first, exclusive)."""
    found = _moment(text)
    if found is None:
        raise ValueError(f"not a date: {text!r}")
    at, is_date = found
    end = at + 86400.0 if is_date else at  # the first moment after the day (or the moment itself)
    if op == "$gte":
        return lambda t: t >= at
    if op == "$lt":
        return lambda t: t < at
    if op == "$gt":
        return (lambda t: t >= end) if is_date else (lambda t: t > at)
    return (lambda t: t < end) if is_date else (lambda t: t <= at)


def _in_range(op: str, actual: Any, value: Any) -> bool:
    """``actual op value`` for a range operator: numbers with numbers, dates with dates."""
    if isinstance(value, str):
        found = _moment(actual) if isinstance(actual, str) else None
        return found is not None and _date_test(op, value)(found[0])
    return _kind(actual) == "number" and _COMPARE[op](actual, value)


def build_where(filter: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a ``rag.query`` filter and return its canonical clause.

    ``{"doc_cid": "x", "page": {"$gte": 3}}`` becomes
    ``{"$and": [{"doc_cid": {"$eq": "x"}}, {"page": {"$gte": 3}}]}``.  ``$and`` and
    ``$or`` lists are accepted too, so the output is itself a valid filter.
    At most ``MAX_FILTER_DEPTH`` levels and ``MAX_FILTER_CONDITIONS`` conditions.
    """
    budget = [MAX_FILTER_CONDITIONS, MAX_IN_VALUES]  # conditions, $in/$nin values
    return _build(filter, 0, 0, budget)


def _build(filter: Any, level: int, nesting: int, budget: list[int]) -> dict[str, Any]:
    """``level``: how deep this filter's clause lands in the output (the same when the output is
    validated again); ``nesting``: how deep it is in the input (bounded too, against recursion)."""
    if not isinstance(filter, Mapping):
        raise BadRequest("filter must be an object")
    if not filter:
        raise BadRequest("filter is empty")
    too_deep = BadRequest(f"filter is nested deeper than {MAX_FILTER_DEPTH} levels of $and/$or")
    if nesting > 4 * MAX_FILTER_DEPTH:
        raise too_deep
    inner = level + (len(filter) > 1)  # several keys become one $and
    parts: list[dict[str, Any]] = []
    for key, cond in filter.items():
        if key in ("$and", "$or"):
            if not isinstance(cond, list | tuple) or not cond:
                raise BadRequest(f"{key} needs a non-empty list of filters")
            below = inner + (len(cond) > 1)  # a one-element list is replaced by its element
            subs = [_build(c, below, nesting + 1, budget) for c in cond]
            parts.append(subs[0] if len(subs) == 1 else {key: subs})
        else:
            if inner > MAX_FILTER_DEPTH:  # where this condition lands in the output
                raise too_deep
            budget[0] -= 1
            if budget[0] < 0:
                raise BadRequest(f"filter has more than {MAX_FILTER_CONDITIONS} conditions")
            parts.append(_condition(key, cond, budget))
    return parts[0] if len(parts) == 1 else {"$and": parts}


def filter_keys(clause: Mapping[str, Any]) -> set[str]:
    """The metadata fields a clause (from :func:`build_where`) names."""
    keys: set[str] = set()
    for key, cond in clause.items():
        if key in ("$and", "$or"):
            for sub in cond:
                keys |= filter_keys(sub)
        else:
            keys.add(key)
    return keys


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "str" if isinstance(value, str) else "other"


def _equal(actual: Any, value: Any) -> bool:
    return _kind(actual) == _kind(value) != "other" and bool(actual == value)


_MISSING = object()
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def where_matches(clause: Mapping[str, Any], metadata: Mapping[str, Any]) -> bool:
    """Evaluate a :func:`build_where` clause on one chunk's metadata (see the module's semantics)."""
    if "$and" in clause:
        return all(where_matches(c, metadata) for c in clause["$and"])
    if "$or" in clause:
        return any(where_matches(c, metadata) for c in clause["$or"])
    ((key, cond),) = clause.items()
    ((op, value),) = cond.items()
    if key not in metadata:
        return op in ("$ne", "$nin")
    actual = metadata[key]
    if op == "$eq":
        return _equal(actual, value)
    if op == "$ne":
        return not _equal(actual, value)
    if op == "$in":
        return any(_equal(actual, v) for v in value)
    if op == "$nin":
        return not any(_equal(actual, v) for v in value)
    return _in_range(op, actual, value)


Matcher = Callable[[Mapping[str, Any]], bool]


def compile_where(clause: Mapping[str, Any]) -> Matcher:
    """:func:`where_matches` for one clause as a predicate, for evaluating it on many chunks.

    Same meaning; ``$in``/``$nin`` look values up in one hashed set per kind
    (bool, number, str kept apart, so ``True`` never meets ``1``) instead of
    comparing with each: a filter of many values costs the same per chunk
    as one of a few.
    """
    if "$and" in clause:
        alls = [compile_where(c) for c in clause["$and"]]

        def every(m: Mapping[str, Any]) -> bool:
            for f in alls:
                if not f(m):
                    return False
            return True

        return every
    if "$or" in clause:
        anys = [compile_where(c) for c in clause["$or"]]

        def some(m: Mapping[str, Any]) -> bool:
            for f in anys:
                if f(m):
                    return True
            return False

        return some
    ((key, cond),) = clause.items()
    ((op, value),) = cond.items()
    if op in ("$eq", "$ne"):
        kind, equal = _kind(value), op == "$eq"

        def same(m: Mapping[str, Any]) -> bool:
            actual = m.get(key, _MISSING)
            if actual is _MISSING:
                return not equal
            found = _kind(actual) == kind and bool(actual == value)
            return found if equal else not found

        return same
    if op in _RANGE_OPERATORS and isinstance(value, str):
        test = _date_test(op, value)

        def dated(m: Mapping[str, Any]) -> bool:
            actual = m.get(key)
            found = _moment(actual) if isinstance(actual, str) else None
            return found is not None and test(found[0])

        return dated
    if op in _RANGE_OPERATORS:
        compare = _COMPARE[op]

        def ranged(m: Mapping[str, Any]) -> bool:
            actual = m.get(key, _MISSING)
            return actual is not _MISSING and _kind(actual) == "number" and compare(actual, value)

        return ranged
    if op in ("$in", "$nin"):
        kinds: dict[str, set[Any]] = {}
        for v in value:
            kinds.setdefault(_kind(v), set()).add(v)
        wanted = op == "$in"

        def member(m: Mapping[str, Any]) -> bool:
            if key not in m:
                return not wanted
            actual = m[key]
            found = actual in kinds.get(_kind(actual), ()) if _hashable(actual) else False
            return found if wanted else not found

        return member
    raise ValueError(f"not a build_where clause: operator {op!r}")


def _hashable(value: Any) -> bool:
    return isinstance(value, bool | int | float | str)


def _fraction(value: Any) -> bool:
    return isinstance(value, float) and not value.is_integer()


def _around(key: str, x: float) -> dict[str, Any]:
    """Every number within (floor x, ceil x): equal to ``x`` if a float, nothing if an integer."""
    return {"$and": [{key: {"$gt": math.floor(x)}}, {key: {"$lt": math.ceil(x)}}]}


def _join(op: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return parts[0] if len(parts) == 1 else {op: parts}


_EXACT_LIMIT = 2**53
"""Beyond this magnitude ChromaDB compares numbers inexactly (it rounds an int operand to a float,
or clamps it to int64), so such a condition could miss a chunk that matches: it is left to
:func:`where_matches`."""


def _inexact_for_chroma(value: Any) -> bool:
    values = value if isinstance(value, list) else [value]
    return any(
        isinstance(v, int | float) and not isinstance(v, bool) and abs(v) >= _EXACT_LIMIT for v in values
    )


def _chroma_condition(key: str, op: str, value: Any) -> dict[str, Any] | None:
    """ChromaDB's version of one condition; ``None`` means "no constraint" (matches everything)."""
    if _inexact_for_chroma(value) or (op in _RANGE_OPERATORS and isinstance(value, str)):
        return None  # beyond ChromaDB's exact numbers, or a date: ChromaDB compares no strings by range
    if op in ("$in", "$nin"):
        groups: dict[str, list[Any]] = {}
        fractions: list[float] = []
        for v in value:
            if _fraction(v):
                fractions.append(v)
            else:  # ChromaDB wants one type per list: bool, int, float and str apart
                group = groups.setdefault(type(v).__name__, [])
                if v not in group:
                    group.append(v)
        parts = [{key: {op: vs}} for vs in groups.values() if vs]
        if op == "$in":
            parts += [_around(key, x) for x in fractions]
            return _join("$or", parts)
        # $nin: a fraction is unequal to every integer; left out, the clause is wider, never narrower.
        return _join("$and", parts) if parts else None
    if not _fraction(value):
        return {key: {op: value}}
    if op == "$eq":
        return _around(key, value)
    if op == "$ne":
        return None
    if op in ("$gt", "$gte"):
        return {key: {"$gt": math.floor(value)}}
    return {key: {"$lt": math.ceil(value)}}


def chroma_where(clause: Mapping[str, Any]) -> dict[str, Any] | None:
    """A ChromaDB ``where`` matching at least every chunk ``clause`` matches (``None``: no filter).

    Filter its hits with :func:`where_matches`: widened comparisons may let more through.
    """
    if "$and" in clause:
        subs = [s for s in (chroma_where(c) for c in clause["$and"]) if s is not None]
        return _join("$and", subs) if subs else None
    if "$or" in clause:
        ors = [chroma_where(c) for c in clause["$or"]]
        if any(s is None for s in ors):
            return None
        return _join("$or", [s for s in ors if s is not None])
    ((key, cond),) = clause.items()
    ((op, value),) = cond.items()
    return _chroma_condition(key, op, value)

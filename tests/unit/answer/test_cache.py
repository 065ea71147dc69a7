"""The answer cache: hits, expiry on an injected clock, a size bound, invalidation per corpus."""

from __future__ import annotations

from hearthnet.answer.cache import AnswerCache, CacheKey


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_stored_answer_is_found_for_the_same_question_however_it_is_spaced_or_cased() -> None:
    cache = AnswerCache(ttl=300, max_entries=8, clock=Clock())
    cache.put(CacheKey.of("How do I bleed a radiator?", "s1", ["house", "garden"]), {"answer": "x"})
    assert cache.get(CacheKey.of("  how do I  bleed a RADIATOR? ", "s1", ["garden", "house"])) == {
        "answer": "x"
    }
    assert cache.get(CacheKey.of("How do I bleed a radiator?", "s2", ["house", "garden"])) is None
    assert cache.get(CacheKey.of("How do I bleed a radiator?", "s1", ["house"])) is None
    assert (cache.hits, cache.misses) == (1, 2)


def test_an_answer_expires_after_the_ttl() -> None:
    clock = Clock()
    cache = AnswerCache(ttl=300, max_entries=8, clock=clock)
    key = CacheKey.of("q", None, ["house"])
    cache.put(key, {"answer": "x"})
    clock.now += 299.9
    assert cache.get(key) is not None
    clock.now += 0.1
    assert cache.get(key) is None and len(cache) == 0


def test_the_least_recently_used_answer_goes_past_the_bound() -> None:
    cache = AnswerCache(ttl=300, max_entries=2, clock=Clock())
    a, b, c = (CacheKey.of(q, None, ["house"]) for q in "abc")
    cache.put(a, {"n": 1})
    cache.put(b, {"n": 2})
    assert cache.get(a) is not None  # a is now the most recent
    cache.put(c, {"n": 3})
    assert len(cache) == 2 and cache.get(b) is None and cache.get(a) is not None


def test_invalidating_a_corpus_drops_exactly_the_answers_that_drew_on_it() -> None:
    cache = AnswerCache(ttl=300, max_entries=8, clock=Clock())
    both = CacheKey.of("q", None, ["house", "garden"])
    garden = CacheKey.of("q", None, ["garden"])
    house = CacheKey.of("q2", "s", ["house"])
    for key in (both, garden, house):
        cache.put(key, {})
    assert cache.invalidate_corpus("house") == 2
    assert cache.get(garden) is not None and cache.get(both) is None and cache.get(house) is None
    assert cache.invalidate_session("s") == 0


def test_changing_an_answer_handed_out_does_not_change_the_cache() -> None:
    cache = AnswerCache(ttl=300, max_entries=8, clock=Clock())
    key = CacheKey.of("q", None, ["house"])
    stored = {"answer": "x", "sources": [{"chunk_id": "a"}]}
    cache.put(key, stored)
    stored["sources"].append({"chunk_id": "b"})
    got = cache.get(key)
    assert got == {"answer": "x", "sources": [{"chunk_id": "a"}]}
    got["sources"].clear()
    assert cache.get(key) == {"answer": "x", "sources": [{"chunk_id": "a"}]}

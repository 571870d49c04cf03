"""The Lookahead n-gram pool: capacity G per key, LRU refresh and eviction, prompt seeding."""

import pytest

from specviz.lookahead.pool import NgramPool


def test_capacity_per_key_evicts_least_recently_seen():
    pool = NgramPool(ngram_len=2, capacity=3)
    for ngram in [(1, 2), (3, 4), (5, 6), (7, 8)]:
        pool.add(9, ngram)
    assert pool.candidates(9) == [(3, 4), (5, 6), (7, 8)]   # (1, 2) was the oldest
    assert len(pool) == 3
    # Another key has its own capacity.
    pool.add(10, (1, 1))
    assert pool.candidates(10) == [(1, 1)]
    assert len(pool) == 4


def test_reinsert_refreshes_instead_of_duplicating():
    pool = NgramPool(ngram_len=2, capacity=3)
    for ngram in [(1, 2), (3, 4), (5, 6)]:
        pool.add(0, ngram)
    pool.add(0, [1, 2])                       # seen again: moves to the most-recent end
    assert pool.candidates(0) == [(3, 4), (5, 6), (1, 2)]
    assert len(pool) == 3
    pool.add(0, (7, 8))                       # full: now (3, 4) is the oldest and goes
    assert pool.candidates(0) == [(5, 6), (1, 2), (7, 8)]
    assert len(pool) == 3
    assert pool.snapshot(0) == [[5, 6], [1, 2], [7, 8]]
    assert pool.candidates(0, limit=2) == [(5, 6), (1, 2)]


def test_candidates_are_a_copy_and_missing_keys_are_empty():
    pool = NgramPool(ngram_len=1, capacity=2)
    pool.add(4, (5,))
    got = pool.candidates(4)
    got.append((6,))
    assert pool.candidates(4) == [(5,)]
    assert pool.candidates(99) == [] and pool.snapshot(99) == []
    assert 4 in pool and 99 not in pool


def test_seed_from_prompt_inserts_every_ngram():
    pool = NgramPool(ngram_len=2, capacity=4)   # N = 3: key + 2 tokens
    prompt = [1, 2, 3, 1, 2, 4, 1, 2, 3]
    inserted = pool.seed_from_prompt(prompt)
    assert inserted == len(prompt) - 2
    # key 1 saw (2, 3), (2, 4), then (2, 3) again: refreshed to the end.
    assert pool.candidates(1) == [(2, 4), (2, 3)]
    assert pool.candidates(2) == [(3, 1), (4, 1)]
    assert pool.candidates(3) == [(1, 2)]
    assert pool.candidates(4) == [(1, 2)]
    assert len(pool) == 6


def test_seed_from_short_prompt_and_zero_capacity():
    pool = NgramPool(ngram_len=4, capacity=2)
    assert pool.seed_from_prompt([1, 2, 3]) == 0     # shorter than one N-gram
    assert len(pool) == 0
    empty = NgramPool(ngram_len=2, capacity=0)      # G = 0: nothing is ever kept
    empty.seed_from_prompt([1, 2, 3, 4, 5])
    empty.add(1, (2, 3))
    assert len(empty) == 0 and empty.candidates(1) == []


def test_wrong_length_is_refused():
    pool = NgramPool(ngram_len=2, capacity=2)
    with pytest.raises(ValueError):
        pool.add(1, (2,))

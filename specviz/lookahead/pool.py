"""The Lookahead n-gram pool: key token -> the n-grams of N-1 tokens seen after it.

Each key keeps at most `capacity` (G) n-grams, least-recently-seen first, so the
list order is also the order candidates are verified in. Seeing an n-gram again
moves it to the end; adding to a full list drops the oldest. G is small (a few
to a few dozen), so a plain list per key is the fastest structure in Python.
"""

from __future__ import annotations


class NgramPool:
    def __init__(self, ngram_len: int, capacity: int):
        if ngram_len < 1:
            raise ValueError(f"n-grams need at least one token after the key, got {ngram_len}")
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.ngram_len = ngram_len    # N - 1: tokens after the key
        self.capacity = capacity      # G
        self.entries: dict[int, list[tuple[int, ...]]] = {}
        self.size = 0                 # n-grams held, all keys together

    def add(self, key: int, ngram) -> None:
        """Insert (or refresh) one n-gram following `key`."""
        if self.capacity == 0:
            return
        ngram = tuple(ngram)
        if len(ngram) != self.ngram_len:
            raise ValueError(f"expected {self.ngram_len} tokens after the key, got {len(ngram)}")
        entry = self.entries.get(key)
        if entry is None:
            self.entries[key] = [ngram]
            self.size += 1
            return
        if ngram in entry:
            entry.remove(ngram)       # refreshed: moves to the most-recent end
        elif len(entry) >= self.capacity:
            entry.pop(0)              # full: the least recently seen goes
        else:
            self.size += 1
        entry.append(ngram)

    def seed_from_prompt(self, token_ids: list[int]) -> int:
        """Insert every N-gram of `token_ids` (first token = key); returns how many were inserted."""
        n = self.ngram_len
        count = 0
        for i in range(len(token_ids) - n):
            self.add(token_ids[i], token_ids[i + 1:i + 1 + n])
            count += 1
        return count

    def candidates(self, key: int, limit: int | None = None) -> list[tuple[int, ...]]:
        """The n-grams following `key`, least-recently-seen first (the live list: do not mutate)."""
        entry = self.entries.get(key, ())
        return list(entry if limit is None else entry[:limit])

    def snapshot(self, key: int) -> list[list[int]]:
        """A copy of the entry for `key`, for step payloads."""
        return [list(g) for g in self.entries.get(key, ())]

    def __len__(self) -> int:
        return self.size

    def __contains__(self, key: int) -> bool:
        return key in self.entries

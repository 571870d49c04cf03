"""The prompt-lookup matcher alone: no model."""

import random

from specviz.prompt_lookup.match import Copy, NgramIndex


def brute_force(text, length, limit, max_ngram, min_ngram):
    """The rule stated as a scan: longest suffix first, then the latest earlier occurrence, distinct."""
    found, seen = [], set()
    for n in range(min(max_ngram, len(text) - 1), min_ngram - 1, -1):
        suffix = text[len(text) - n:]
        for end in range(len(text) - 2, n - 2, -1):
            if text[end - n + 1:end + 1] == suffix:
                tokens = tuple(text[end + 1:end + 1 + length])
                if tokens not in seen:
                    seen.add(tokens)
                    found.append(Copy(tokens, n, end + 1))
    return found[:limit]


def test_a_repeated_phrase_is_copied_from_its_last_occurrence():
    index = NgramIndex([5, 6, 7, 8, 9, 1, 5, 6, 7, 2, 3, 5, 6])
    best = index.copies(length=3, limit=2)
    # "5 6" ended at 7 and 1 before; "... 3 5 6" has no 3-gram match, so the 2-gram's latest wins.
    assert best[0] == Copy((7, 2, 3), matched=2, source=8)
    assert best[1] == Copy((7, 8, 9), matched=2, source=2)


def test_the_longest_match_beats_a_more_recent_shorter_one():
    index = NgramIndex([1, 2, 3, 4, 9, 2, 3, 8, 1, 2, 3])
    assert index.copies(length=2)[0] == Copy((4, 9), matched=3, source=3)


def test_nothing_is_copied_without_an_earlier_occurrence():
    index = NgramIndex([1, 2, 3, 4])
    assert index.copies(length=3) == []
    index.extend([1, 2])
    assert index.copies(length=3) == [Copy((3, 4, 1), matched=2, source=2)]


def test_incremental_extension_matches_the_brute_force_scan():
    rng = random.Random(3)
    for trial in range(60):
        text = [rng.randrange(4) for _ in range(rng.randrange(1, 40))]
        index = NgramIndex(text[:5], max_ngram=3, min_ngram=1)
        index.extend(text[5:])
        for length, limit in ((1, 1), (3, 4), (5, 2)):
            got = index.copies(length, limit)
            # The index looks at the latest occurrences only (OCCURRENCES); on short texts that is all.
            assert got == brute_force(text, length, limit, 3, 1)[:len(got)], (trial, text)
            assert len(got) == min(limit, len(brute_force(text, length, limit, 3, 1)))

"""A measured cost curve t(n), milliseconds for a forward over n rows, read one way by every sizing (Sequoia's
tree, Lookahead's window, prompt lookup's chain), by the race's contention check and by the what-if panel.

Pure arithmetic over {n: ms}: no torch, no model.
"""

from __future__ import annotations

from bisect import bisect_left


class Curve:
    """{n: ms} sorted once, read at any n (a step that prices several lengths reads one of these)."""

    def __init__(self, curve: dict):
        points = sorted((int(k), float(v)) for k, v in curve.items())
        if not points:
            raise ValueError("a cost curve needs at least one measured size")
        self.sizes = [n for n, _ in points]
        self.ms = [ms for _, ms in points]

    def at(self, n: float, past_end: str = "linear") -> float | None:
        """t(n): linear between the measured sizes, the first size's time below it, and past the last size the
        last segment's line ("linear": a forward over more rows never costs less) or None ("none": not measured
        there)."""
        sizes, ms = self.sizes, self.ms
        if n <= sizes[0]:
            return ms[0]
        i = bisect_left(sizes, n)
        if i == len(sizes):
            if past_end == "none":
                return None
            if len(sizes) == 1:
                return ms[0]
            i = len(sizes) - 1   # the last segment, extended
        lo, hi = sizes[i - 1], sizes[i]
        return ms[i - 1] + (ms[i] - ms[i - 1]) * (n - lo) / (hi - lo)


def interpolate(curve: dict, n: float, past_end: str = "linear") -> float | None:
    """`Curve(curve).at(n, past_end)`, for a single reading."""
    return Curve(curve).at(n, past_end)


def monotone(curve: dict) -> dict[int, float]:
    """The closest non-decreasing curve (pool adjacent violators): more rows never cost less.

    A CPU curve is noisy by a few percent, and a measured t(2) below t(1) made two-node trees look free; pooling
    replaces each decreasing run by its mean (where taking each size's minimum over larger sizes would bias
    every cost low).
    """
    sizes = sorted(int(n) for n in curve)
    blocks: list[list[float]] = []   # [mean, count] per pooled run
    for n in sizes:
        blocks.append([float(curve[n]), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, c2), (m1, c1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2])
    return dict(zip(sizes, (m for m, c in blocks for _ in range(c))))

"""The one cost curve (`specviz.engine.curve`): how t(n) is read between, below and past the measured sizes, and
made non-decreasing, for every sizing and the what-if panel alike."""

from __future__ import annotations

import pytest

from specviz.engine.curve import Curve, interpolate, monotone

CURVE = {1: 4.0, 2: 4.5, 4: 5.0, 8: 7.0}


def test_between_below_and_past_the_measured_sizes():
    t = Curve({str(n): ms for n, ms in CURVE.items()})   # as caches store it: string keys
    assert t.at(3) == pytest.approx(4.75) and t.at(8) == 7.0 and t.at(6) == pytest.approx(6.0)
    assert t.at(1) == 4.0 and t.at(0.5) == 4.0           # below the first size: its time
    assert t.at(12) == pytest.approx(9.0)                # past the last: the last segment's line
    assert t.at(12, past_end="none") is None and t.at(8, past_end="none") == 7.0
    assert interpolate(CURVE, 3) == t.at(3)
    assert Curve({4: 2.0}).at(16) == 2.0                 # one size: flat
    with pytest.raises(ValueError):
        Curve({})


def test_monotone_pools_a_dip_rather_than_taking_later_minima():
    dipping = {1: 5.0, 2: 4.0, 4: 6.0, 8: 5.0, 16: 9.0}
    assert monotone(dipping) == pytest.approx({1: 4.5, 2: 4.5, 4: 5.5, 8: 5.5, 16: 9.0})
    # Negative control: the rule the Lookahead sizing once had (each size's minimum over larger sizes) reads
    # t(1) as 4.0 here: every cost biased low.
    suffix_min = {n: min(ms for m, ms in dipping.items() if m >= n) for n in dipping}
    assert suffix_min[1] == 4.0 != monotone(dipping)[1]
    assert monotone(CURVE) == CURVE


def test_every_sizing_and_the_race_read_the_one_curve():
    from specviz.engine import curve
    from specviz.runtime import race
    from specviz.lookahead import sizing as lookahead_sizing
    from specviz.sequoia import sizing as sequoia_sizing

    assert sequoia_sizing.interpolate is lookahead_sizing.interpolate is curve.interpolate
    assert sequoia_sizing.monotone is lookahead_sizing.monotone is curve.monotone
    assert race.interpolate is curve.interpolate   # `forward_slowdown`'s t(n), none past the curve's sizes

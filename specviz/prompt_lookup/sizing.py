"""How many copied tokens a prompt lookup step verifies: priced by the target's measured forward curve.

A step that verifies L copied tokens runs the target over L + 1 rows, t(L + 1), and brings 1 + the sum of
the tokens' reach probabilities (`match.Copy.reaches`: each token right and every one before it). The
step takes the L with the most expected tokens per millisecond (0: `ar`'s step), so the length follows the
hardware: where rows are nearly free (a GPU; a CPU's q4 kernel up to ~8 rows) a good match verifies all of
itself, and where each row costs, only its likely head.

The curve is the target's, the one Lookahead's `auto` and Sequoia's sizing read (`profiler.curve_key`, measured
at Sequoia's sizes too, so the app's worker measures it once for all), read at the sizes Lookahead's choice reads; until it is measured a race starts on a prior (`PRIOR_CURVES`) and says so. The pricing itself is
pure arithmetic, `match.best_length` (Lookahead prices its copies with it too); here the curve is read or measured.
"""

from __future__ import annotations

from ..request import Range
from .match import VERIFY_MS

PRIOR_OVERHEAD = 0.1   # the same against a prior's t(1) = 1
# t(n) / t(1) before anything is measured: a CPU's q4 forward on SpecViz's kernel (Zen 4 EPYC, 2 threads,
# `python -m specviz floors`), and a GPU's, where a few rows cost what one does.
PRIOR_CURVES = {"cpu": {1: 1.0, 2: 1.03, 4: 1.07, 8: 1.22, 16: 2.1, 32: 4.0, 64: 7.8},
                "cuda": {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.01, 16: 1.03, 32: 1.08, 64: 1.2}}


check_tokens = Range("prompt lookup's copied tokens", 1, 16).check_whole


def step_overhead(curve_source: str) -> float:
    """A copy step's own work in the curve's units: ms for a measured curve, t(1) = 1 for a prior."""
    return PRIOR_OVERHEAD if curve_source == "prior" else VERIFY_MS


# -- the curve: cached, measured, or the prior ------------------------------------------------------------

def _prior(pair) -> dict[int, float]:
    return PRIOR_CURVES["cuda" if pair.device.type == "cuda" else "cpu"]


def decoder_options(pair, sampling=None, graphs="auto", tokens=None, curve=None, curve_source=None,
                    **options) -> dict:
    """The decoder's options with the target's curve: cached, else measured now (a second or two), unless given."""
    from ..engine import graphs as graph_modes
    from ..engine.profiler import small_target_curve

    if curve is not None:
        return {**options, "tokens": tokens, "curve": curve, "curve_source": curve_source or "given"}
    wanted = graph_modes.capture_wanted(graphs, pair.device)
    measured, _ = small_target_curve(pair, wanted)
    return {**options, "tokens": tokens, "curve": measured, "curve_source": "measured"}


def auto_pending(pair, sampling=None, graphs="auto", curve=None, **options) -> bool:
    """Whether building this decoder would measure the target's curve first (nothing measured here)."""
    from ..engine import graphs as graph_modes
    from ..engine.profiler import target_curve_cached

    return curve is None and not target_curve_cached(pair, graph_modes.capture_wanted(graphs, pair.device))


# What the app's worker runs between races while the curve is pending: what building the decoder would.
measure_auto = decoder_options


def first_sizes(pair, sampling=None, graphs="auto", **options) -> tuple[dict, str]:
    """Options to start a race at once while the curve is unmeasured: the prior, and what to tell the reader."""
    return ({**options, "curve": _prior(pair), "curve_source": "prior"},
            "Prompt lookup priced its copies on a prior curve of the forward times")



AUTO_WHAT = "prompt lookup's forward curve"   # what `auto_size_words` names (`runtime.auto_notes`)


def auto_size_words(settings: dict) -> str | None:
    """Which curve priced the run's copies, in words; None where one was given."""
    source = settings.get("curve_source")
    return {"prior": "a prior curve", "measured": "this machine's measured curve"}.get(source)


def why_small(pair, graphs: bool, settings: dict) -> str:
    """Nothing: each step's length is priced as it runs (the tree panel shows what each verified)."""
    return ""

"""Lookahead's column of the what-if panel (`Method.whatif`): expected tokens E(W, N, G) and one forward over
(N-1)(W+G) rows (plus a copy's), priced with the machine's (or the run's, or an uploaded profile's) t(n).

Pure functions of a trace and the plan `auto` cached: no model, no gradio.
"""

from __future__ import annotations

from ..engine.curve import interpolate
from ..request import ILLUSTRATIVE_LOOKAHEAD
from ..trace import RaceTrace
from ..ui import measured
from ..ui.whatif import curve_of, method_column, other_ms, speedup_over_baseline
from .method import METHOD

PLAN = ("lookahead-auto", "target")   # the plans `auto` caches for it: per target, device and dtype (no draft)
SLIDERS = {"window": (1, 32, 4, "W (window)"), "ngram": (2, 8, 3, "N (n-gram)"), "guesses": (0, 32, 4, "G (guesses)")}
# Said under the panel's columns: what its accepted length is a model of.
NOTE = ("Lookahead's accepted length is a model: each verified n-gram's next token is right at the rate this run's "
        "n-grams matched at that position (before a run, a prior calibrated on the offline default, see "
        "<code>lookahead/sizing.py</code>); text that repeats itself or quotes the prompt does better.")


def plan_curve(plan: dict) -> dict[int, float]:
    return curve_of(plan.get("curve"))


def inputs(trace: RaceTrace | None, plan: dict, from_run: bool, profile: dict | None) -> dict:
    """The rate its n-grams matched at, how full the pool kept its candidates, and the copies a step verified
    with their rate: the run's own where `from_run` and it verified any, else the plan's rate and the prior."""
    run = trace.runs.get(METHOD.id) if trace else None
    rates = measured.lookahead_rates(run) if from_run else None
    out = {"lookahead_plan": plan or None, "lookahead_rate": plan.get("accept_rate"), "pool_fill": None}
    if rates and rates["candidates"]:
        useful = min(int(run.settings.get("guesses") or 0), int(run.settings.get("window") or 0)) or 1
        steps = len(rates["candidates"])
        mean_copies = sum(rates["copies"]) / steps
        mean_pooled = sum(rates["candidates"]) / steps - mean_copies
        copied = [w for w, c in zip(rates["widths"], rates["copies"]) if c]
        # The pool's and the copies' rates apart (`measured.lookahead_rates`), the copies a step verified and
        # how long they were (a priced copy may outrun N-1).
        out.update(lookahead_rate=rates["pool_rates"] or plan.get("accept_rate"),
                   pool_fill=min(mean_pooled / useful, 1.0), copy_rate=rates["copy_rates"], copies=mean_copies,
                   copy_len=sum(copied) / len(copied) if copied else 0.0)
    return out


def point(inp: dict, window: int, ngram: int, guesses: int) -> dict | None:
    from .sizing import ACCEPT_RATE, COPY_ACCEPT, COPY_MATCH, COPY_ROWS, step_tokens

    target = inp.get("target_ms")
    if not target or len(target) < 2:
        return None
    rate = inp.get("lookahead_rate") or ACCEPT_RATE
    n = step_tokens(int(window), int(ngram), int(guesses))
    # The pool holds at most min(G, W) useful candidates for a key; a run says how full it kept them.
    candidates = min(int(guesses), int(window)) * (inp.get("pool_fill") or 1.0)
    # Copies (prompt lookup): the run's own rate and count where it had them, else the sizing's prior.
    copies = inp["copies"] if "copies" in inp else COPY_MATCH * COPY_ROWS
    copy_len = max(int(ngram) - 1, round(inp.get("copy_len") or 0))
    e = measured.lookahead_expected(rate, int(ngram), candidates, inp.get("copy_rate") or COPY_ACCEPT, copies,
                                    copy_len)
    n_rows = n + copies * copy_len   # a copy's rows run in the steps that have one
    target_ms, other = interpolate(target, max(n_rows, 1)), other_ms(inp, METHOD.id)
    return {"window": window, "ngram": ngram, "guesses": guesses, "step_tokens": n, "tokens_per_step": e,
            "target_ms": target_ms, "draft_ms": 0.0, "other_ms": other, "step_ms": target_ms + other,
            "speedup": speedup_over_baseline(inp, METHOD.id, e, target_ms, 0.0, other)}


def line(inp: dict, sizes: dict) -> list[tuple[float, float]]:
    """(W, predicted speedup) for W = 1..32 at the sliders' N and G: the panel's curve."""
    ngram, guesses = int(sizes["ngram"]), int(sizes["guesses"])
    return [(float(wv), p["speedup"]) for wv in range(1, 33) if (p := point(inp, wv, ngram, guesses))]


def column(inp: dict, done: dict, sizes: dict) -> str:
    """The panel's Lookahead column ("" when nothing predicts it yet)."""
    window, ngram, guesses = int(sizes["window"]), int(sizes["ngram"]), int(sizes["guesses"])
    la = point(inp, window, ngram, guesses)
    if la is None:
        return ""
    auto = (inp.get("lookahead_plan") or {}).get("choice")
    ap = point(inp, auto["window"], auto["ngram"], auto["guesses"]) if auto else None
    got = done.get(METHOD.id)
    w_run = int(got["settings"].get("window") or window) if got else None
    sizes_of = lambda p: f"W={p['window']}, N={p['ngram']}, G={p['guesses']}"   # noqa: E731
    return method_column(
        METHOD.id, (la, f"your {sizes_of(la)}", f"your {sizes_of(la)} (one forward over {la['step_tokens']} tokens)"),
        (ap, sizes_of(ap), " (at its own N and G)") if ap else None,
        (point(inp, **ILLUSTRATIVE_LOOKAHEAD), sizes_of(ILLUSTRATIVE_LOOKAHEAD)),
        (got, f"W={w_run}", w_run) if got else None, "window",
        f"{METHOD.label}: predicted speedup against W (N={ngram}, G={guesses})", "window W", line(inp, sizes))

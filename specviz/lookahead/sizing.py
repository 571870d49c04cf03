"""`--lookahead auto`: choose W, N, G from what one target forward costs on this machine.

A Lookahead step is one forward over n = (N-1)(W+G) tokens. Its benefit is the
expected number of tokens the step emits, E(W, N, G); its cost is t(n), the
measured time of that forward (`engine.profiler.forward_curve`). We pick the setting
with the highest predicted speedup over autoregressive decoding,
    speedup = E(W, N, G) * t(1) / t(n).

The model of E, stated plainly (it is a prior, not a measurement):
- Only pool candidates can add tokens (Jacobi iteration on its own almost never
  produces a whole correct n-gram), so G = 0 gives E = 1 exactly.
- A candidate's k-th token is right, given the previous ones were, with
  probability `ACCEPT_RATE`; candidates are treated as independent, and at most
  min(G, W) of them are useful (the pool for a key is filled by the window's W
  columns, so guesses beyond W are mostly stale repeats):
      E = 1 + sum_{k=1}^{N-1} (1 - (1 - a^k)^min(G, W)).
- Because E grows slowly (each extra token needs a whole correct prefix), the
  choice is driven by t(n): on a CPU it favours sizes whose forward costs barely
  more than one token's.
`ACCEPT_RATE` = 0.06 is calibrated on the offline default (SmolLM2-135M, greedy):
(W, N, G) = (5, 3, 5) with the prompt pool measured 1.21 tokens per forward on a
code prompt, and the model gives 1.24 there. It is a small model's rate; a larger
model, or text that quotes its prompt, accepts more, so the choice errs small.

Copied candidates (`COPY_ROWS`, prompt lookup) are one more candidate of N-1 tokens, there in
a share `COPY_MATCH` of steps (the text's last token occurred before), its k-th token right
with probability `COPY_ACCEPT`^k; uncaptured its rows run only in those steps, so a step's
cost is (1 - m) t(n) + m t(n + N - 1). Both numbers are measured: prompt lookup alone over `ar`'s
own greedy texts of the 12 bench prompts (4 suites, 128 tokens, fp32) matched in 0.43-0.60 of
steps and gave 1.09 (chat) to 1.45 (math) tokens per forward at N-1 = 3, which this model
fits with m = 0.5, c = 0.42. Here a copy is N-1 tokens; the decoder then prices each step's copy length
on the same curve (`decoder._priced_copies`), so a good match verifies more, and the choice errs small.

Graphs: a decoder whose step is captured (`engine.graphs.capture_wanted`: CUDA under
`auto`, never a CPU) pays graph replays, whose t(n) is far flatter than eager launches', so its
choice is made from the graphed curve (`forward_curve(graphs=True)`) and cached apart.
"""

from __future__ import annotations

from ..engine.curve import interpolate, monotone
from ..engine import graphs as graph_modes   # capture_wanted: whether the decoder being sized captures its step
from ..engine.profiler import SMALL_SIZES as CURVE_SIZES   # the sizes the choice reads of the target's curve
from ..errors import InvalidInput
from ..request import RANGES

ACCEPT_RATE = 0.06
COPY_ROWS = 1        # copied candidates a step verifies besides the pool's G (the decoder's default)
COPY_MATCH = 0.5     # share of steps that find a copy to verify
COPY_ACCEPT = 0.42   # a copied token right, given the ones before it were
NGRAMS = [2, 3, 4, 5]
WINDOWS = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15]
GUESSES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15]
AUTO_VERSION = 3     # 3: copied candidates in the model


def resolve_settings(pair, window=None, ngram=None, guesses=None, graphs="auto"
                     ) -> tuple[int, int, int, dict[int, float] | None]:
    """(W, N, G, the curve `auto` chose them on) from user options; all None means auto, sized for the path the
    decoder runs (`graphs`: its mode, 'auto' | 'on' | 'off'); the curve is None where the sizes were given. The
    decoder prices its copies on that curve: one measurement (a contended one is used for this run only and
    not cached, so asking `choose` twice would measure twice)."""
    given = [v is not None for v in (window, ngram, guesses)]
    if not any(given):
        result = choose(pair, graphs=graph_modes.capture_wanted(graphs, pair.device))
        choice, curve = result["choice"], {int(n): float(ms) for n, ms in result["curve"].items()}
        return choice["window"], choice["ngram"], choice["guesses"], curve
    if not all(given):
        raise InvalidInput("give all of window, ngram and guesses, or none of them (auto)")
    # The bounds the page, the API and the command line check them against (`request.RANGES`).
    window, ngram, guesses = (RANGES[k].check_whole(v) for k, v in
                              (("window", window), ("ngram", ngram), ("guesses", guesses)))
    return window, ngram, guesses, None


def step_tokens(window: int, ngram: int, guesses: int) -> int:
    """Input tokens of one full-window step: t0, the window, G candidates."""
    return (ngram - 1) * (window + guesses)


def expected_tokens(window: int, ngram: int, guesses: int, accept_rate: float = ACCEPT_RATE,
                    copies: int = COPY_ROWS) -> float:
    """Tokens a step emits: position k is reached when some candidate has its first k right (the pool's
    useful ones and, in a share of steps, the copy: treated as independent)."""
    useful = min(guesses, window)
    copy = COPY_MATCH if copies else 0.0
    return 1.0 + sum(1.0 - (1.0 - accept_rate ** k) ** useful * (1.0 - copy * COPY_ACCEPT ** k)
                     for k in range(1, ngram))


def step_ms(curve: dict[int, float], window: int, ngram: int, guesses: int, copies: int = COPY_ROWS) -> float:
    """A step's expected forward time: the copy's rows run only in the steps that found one."""
    n = step_tokens(window, ngram, guesses)
    if not copies:
        return interpolate(curve, n)
    return (1 - COPY_MATCH) * interpolate(curve, n) + COPY_MATCH * interpolate(curve, n + copies * (ngram - 1))


def settings_table(curve: dict[int, float]) -> list[dict]:
    """Every candidate setting with its predicted cost and benefit, best first."""
    t1 = curve[min(curve)]
    max_n = max(curve)
    rows = []
    for ngram in NGRAMS:
        for window in WINDOWS:
            for guesses in GUESSES:
                n = step_tokens(window, ngram, guesses)
                if n > max_n:
                    continue
                e = expected_tokens(window, ngram, guesses)
                ms = step_ms(curve, window, ngram, guesses)
                rows.append({"window": window, "ngram": ngram, "guesses": guesses, "step_tokens": n,
                             "forward_ms": round(ms, 3), "expected_tokens": round(e, 4),
                             "predicted_speedup": round(e * t1 / ms, 4)})
    # Ties (e.g. G beyond W adds cost but no benefit) go to the smaller forward.
    rows.sort(key=lambda r: (-r["predicted_speedup"], r["step_tokens"]))
    return rows


def _auto_key(pair, graphs: bool) -> str:
    """The choice's cache key: this target, device, dtype and forward (the draft plays no part in Lookahead)."""
    from ..engine.profiler import target_key

    return target_key(pair) + ("|graphs" if graphs else "")


def cached_choice(pair, graphs: bool = False) -> dict | None:
    """`choose`'s result when this machine has it cached, else None (measures nothing)."""
    from ..engine.profiler import load_cached

    cached = load_cached("lookahead-auto", _auto_key(pair, graphs))
    if cached and cached.get("version") == AUTO_VERSION and cached.get("accept_rate") == ACCEPT_RATE:
        return cached
    return None


def _result(key: str, curve: dict[int, float], graphs: bool) -> dict:
    table = settings_table(curve)
    best = table[0]
    return {"version": AUTO_VERSION, "key": key, "accept_rate": ACCEPT_RATE, "graphs": bool(graphs),
            "curve": {str(n): round(ms, 3) for n, ms in sorted(curve.items())},
            "table": table,
            "choice": {k: best[k] for k in ("window", "ngram", "guesses", "step_tokens",
                                              "forward_ms", "expected_tokens", "predicted_speedup")}}


def choose(pair, refresh: bool = False, graphs: bool = False) -> dict:
    """{"curve", "table", "choice", "accept_rate", "key"} for this target, device and dtype (cached);
    `graphs`: from the static-buffer forwards' curve (replays on CUDA)."""
    from ..engine.profiler import save_cached, small_target_curve

    key = _auto_key(pair, graphs)
    cached = None if refresh else cached_choice(pair, graphs)
    if cached:
        return cached
    raw, trusted = small_target_curve(pair, graphs, refresh=refresh)
    result = _result(key, monotone({int(n): float(ms) for n, ms in raw.items()}), graphs)
    # A curve from busy cores is used for this run only (`profiler.forward_curve`), and so is the table.
    if trusted:
        save_cached("lookahead-auto", key, result)
    return result


def _asks_auto(window=None, ngram=None, guesses=None, **_) -> bool:
    return window is None and ngram is None and guesses is None


def auto_pending(pair, sampling=None, graphs="auto", **options) -> bool:
    """Whether these options ask `auto` for a window it would have to measure first: neither the choice nor
    the target's curve it is made from is cached (Sequoia's sizing times the same curve, so a measurement
    under way for Sequoia often has it already). Measures nothing."""
    from ..engine.profiler import target_curve_cached

    graphs = graph_modes.capture_wanted(graphs, pair.device)
    return _asks_auto(**options) and cached_choice(pair, graphs) is None and not target_curve_cached(pair, graphs)


def measure_auto(pair, sampling=None, graphs="auto", **options) -> None:
    """Measure and cache what `auto` needs for these options (the app's worker does it between races)."""
    if _asks_auto(**options):
        choose(pair, graphs=graph_modes.capture_wanted(graphs, pair.device))


# A first estimate of t(n): one warm-up round and one timed round (about a second for a 135M model on a
# CPU), never cached: it sizes one race while the full measurement waits for the race to end.
QUICK_ROUNDS = (1, 1)


def first_sizes(pair, sampling=None, graphs="auto", **options) -> tuple[dict, str]:
    """Options to start a race with at once while `auto`'s measurement is pending (W, N, G chosen on a
    one-round estimate of t(n), untimed by the race), and what to tell the reader."""
    from ..engine.profiler import measure_forward_times

    graphs = graph_modes.capture_wanted(graphs, pair.device)
    warmup, repeats = QUICK_ROUNDS
    raw = measure_forward_times(pair.target, CURVE_SIZES, repeats=repeats, warmup=warmup, graphs=graphs,
                                label="a first estimate of the target's forward times")
    curve = monotone(raw)
    choice = _result(_auto_key(pair, graphs), curve, graphs)["choice"]
    sizes = {k: choice[k] for k in ("window", "ngram", "guesses")}
    words = f"Lookahead W={sizes['window']}, N={sizes['ngram']}, G={sizes['guesses']} from a one-round estimate of " \
            "the forward times"
    return {**options, **sizes, "copy_curve": curve}, words


AUTO_WHAT = "Lookahead's W, N, G"   # what `auto_size_words` names (`runtime.auto_notes`)


def auto_size_words(settings: dict) -> str | None:
    """The W, N, G `auto` ran (also first sizes), in words; None where they were asked for."""
    if not (settings.get("auto") or settings.get("sizing") == "first"):
        return None
    return f"W={settings.get('window')}, N={settings.get('ngram')}, G={settings.get('guesses')}"


def lookahead_words(result: dict) -> str:
    """Why `auto` chose no Lookahead candidates from its pool (G = 0), from `lookahead.sizing.choose`'s result:
    t(1), the tokens the chosen step forwards and their t(n), the same for the best setting with pool candidates,
    its expected tokens per forward, and both predicted speedups. "" where the choice has pool candidates.
    A row's `forward_ms` is a step's expected forward (`step_ms`: a copied candidate's rows in the steps that
    find one), not t(n): the sentence says t(n) from the curve and leaves the copy to the predictions."""
    choice = result.get("choice") or {}
    if int(choice.get("guesses", 1) or 0) != 0 or not result.get("curve"):
        return ""
    curve = {int(k): float(v) for k, v in result["curve"].items()}

    def forwards(row: dict) -> str:
        n = int(row["step_tokens"])
        return "1 token" if n == 1 else f"{n} tokens at t({n}) = {interpolate(curve, n):.1f} ms"

    words = (f"auto chose no Lookahead candidates from its n-gram pool (G=0, W={choice['window']}, "
             f"N={choice['ngram']}): on this machine t(1) = {curve[min(curve)]:.1f} ms and its step forwards "
             f"{forwards(choice)}")
    best = next((r for r in result.get("table") or [] if int(r.get("guesses", 0)) > 0), None)
    if best is None:
        return words + f": predicted {float(choice['predicted_speedup']):.2f}x"
    return words + (f", and the best setting with pool candidates, W={best['window']}, N={best['ngram']}, "
                    f"G={best['guesses']}, forwards {forwards(best)} for {float(best['expected_tokens']):.2f} tokens "
                    f"expected per forward: predicted {float(best['predicted_speedup']):.2f}x against "
                    f"{float(choice['predicted_speedup']):.2f}x without pool candidates (both with a copied "
                    f"candidate's rows in the steps that find one)")


def why_small(pair, graphs: bool, settings: dict) -> str:
    """Why the W, N, G `auto` ran hold no pool candidates (`lookahead_words`), where the cached choice is the one
    the run ran; "" otherwise (`runtime.auto_notes`)."""
    if not settings.get("auto"):
        return ""
    result = cached_choice(pair, graphs)
    choice = (result or {}).get("choice") or {}
    if result and all(choice.get(k) == settings.get(k) for k in ("window", "ngram", "guesses")):
        return lookahead_words(result)
    return ""

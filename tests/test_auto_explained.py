"""`auto` on the 4-bit default says what it chose and why (issue 67, items 4 and 5).

- Where SpecViz's q4 kernel is built and self-tested, `auto` is q4 from the first race, before any measurement,
  and the measurement, once there, confirms it in its times and never flips it (elsewhere: the rule, then the
  fastest measured, as before). A kernel that fails its self-test is not used.
- Where a race's precision or `auto` sizes differ from the last race with the same settings, the trace says
  which and why; where `auto` runs a one-level tree or no Lookahead candidates, it says what the measured t(n)
  and the draft's cost made it choose, from the numbers the sizing chose by.

No test here asserts what this machine measures: the choices are made on times written into a temporary cache.
"""

from __future__ import annotations

import html as htmllib
import re

import pytest
import torch

from test_precision import cache, measured_rule  # noqa: F401 (fixtures: an empty cache; auto without the kernel)
from specviz.engine import kernels, models, precision, quant
from specviz.runtime import auto_notes
from specviz.lookahead import sizing as lookahead_sizing
from specviz.engine.profiler import save_cached
from specviz.trace import RaceTrace, RunTrace

CPU = torch.device("cpu")
KERNEL = quant.KERNEL_WORDS
needs_kernel = pytest.mark.skipif(quant.own_kernel_problem() is not None,
                                  reason=f"SpecViz's q4 kernel is not used here: {quant.own_kernel_problem()}")
needs_q4 = pytest.mark.skipif(not quant.q4_kernel_available(), reason="no 4-bit kernel in this torch")


@pytest.fixture
def kernel(monkeypatch):
    """SpecViz's kernel as `auto` sees it where it is built and self-tested (the loading tests use the real one)."""
    monkeypatch.setattr(models, "own_q4_kernel", lambda: KERNEL)


def names() -> list[str]:
    return models.auto_candidates("default", CPU)


def measured(chosen: str, **ms) -> None:
    """A measurement as `precision.measure` caches it, choosing `chosen`."""
    times = {name: {"1": ms.get(name, 50.0), "16": 3 * ms.get(name, 50.0)} for name in names()}
    save_cached(precision.KIND, precision._key(models.DEFAULT_DISPLAY_NAME),
                {"ms": times, "chosen": chosen, "rows": list(precision.ROWS), "waiting_share": 0.0})


# -- the kernel's self-test ------------------------------------------------------------------------------------


@needs_kernel
def test_the_built_kernel_passes_its_self_test_and_a_wrong_product_fails_it():
    assert quant.self_test() is None
    # Controls: the rows in another order, the min term dropped, the outlier rounded with the rest.
    flipped = quant.self_test(lambda x, linear: linear.rows(x.flip(0)))
    no_min = quant.self_test(lambda x, linear: kernels.Q4Rows(linear.codes, linear.d, torch.zeros_like(linear.m),
                                                             linear.outliers, linear.outlier_weights).rows(x))
    rounded = quant.self_test(lambda x, linear: kernels.Q4Rows(linear.codes, linear.d, linear.m).rows(x))
    for failed in (flipped, no_min, rounded):
        assert failed is not None and failed.startswith("failed its self-test"), failed
    assert quant.self_test(lambda x, linear: linear.rows(x)[:, :-16]).startswith("failed its self-test: (")
    raised = quant.self_test(lambda x, linear: (_ for _ in ()).throw(RuntimeError("bad kernel\nmore")))
    assert raised == "failed its self-test: bad kernel"


@needs_kernel
def test_a_kernel_that_fails_its_self_test_is_not_used(monkeypatch):
    monkeypatch.setattr(quant, "self_test", lambda: "failed its self-test: 3 rows off by 1")
    assert quant.own_kernel_problem.__wrapped__() == "failed its self-test: 3 rows off by 1"


# -- auto is q4 from the first race where the kernel runs -------------------------------------------------------


@needs_q4
def test_with_the_kernel_and_no_measurement_auto_is_q4_and_says_why(cache, kernel):
    assert "q4" in names() and models.precisions_pending("default", CPU)   # measured later, still
    chosen, words = models.auto_precision("default", CPU)
    assert chosen == "q4"
    assert words.startswith(f"auto: q4, SpecViz's 4-bit kernel runs on this CPU ({KERNEL})")
    assert precision.waits_for_measurement(words)   # so the worker measures after this race, to confirm


@needs_q4
def test_a_measurement_that_finds_bf16_faster_keeps_q4_while_the_kernel_runs(cache, kernel):
    measured("bf16", bf16=12.5, q4=19.0, fp32=30.0)
    chosen, words = models.auto_precision("default", CPU)
    assert chosen == "q4" and not precision.waits_for_measurement(words)
    assert "SpecViz's 4-bit kernel" in words and "bf16 came out faster" in words
    assert "bf16 12.5 ms" in words and "q4 19.0 ms" in words and "fp32 30.0 ms" in words   # the measured times


@needs_q4
def test_a_measurement_that_finds_q4_fastest_confirms_it(cache, kernel):
    measured("q4", q4=9.0)
    chosen, words = models.auto_precision("default", CPU)
    assert chosen == "q4" and "the fastest measured here" in words and "q4 9.0 ms" in words


def test_without_the_kernel_auto_is_the_rule_then_the_fastest_measured(cache, measured_rule):
    chosen, words = models.auto_precision("default", CPU)
    assert chosen is None and words.startswith(precision.NOT_MEASURED)
    measured("bf16", bf16=12.5)
    chosen, words = models.auto_precision("default", CPU)
    assert chosen == "bf16" and words.startswith("auto: bf16, the fastest measured on this CPU")


def test_a_model_without_q4_is_not_q4_even_with_the_kernel(cache, kernel):
    assert models.auto_precision("HuggingFaceTB/SmolLM2-360M-Instruct", CPU)[0] is None


@needs_kernel
def test_the_first_race_loads_q4_on_the_kernel(cache):
    pair = models.load_pair("default", "self", device="cpu", dtype="auto")
    assert pair.precision == "q4"
    assert quant.WeightOnlyLayers.of(pair.target).kernel == "vnni"
    assert pair.precision_choice.startswith(f"auto: q4, SpecViz's 4-bit kernel runs on this CPU ({KERNEL})")


def test_the_pair_cache_keeps_the_q4_pair_and_says_what_the_measurement_found(cache, kernel, monkeypatch):
    """The measurement does not change the pair (still q4), but the next race's words give its times."""
    from specviz.runtime.race import PairCache

    if "q4" not in names():
        pytest.skip("no 4-bit kernel in this torch")
    loads = []

    class Loaded:
        precision_choice = ""

    def load(target, draft, dtype, device):
        loads.append(dtype)
        return Loaded()

    monkeypatch.setattr(models, "load_pair", load)
    pairs = PairCache()
    first = pairs.get("default", "self", "auto")
    assert precision.waits_for_measurement(first.precision_choice)
    measured("q4", q4=9.0)
    again = pairs.get("default", "self", "auto")
    assert again is first and loads == ["auto"]   # no second load
    assert "the fastest measured here" in again.precision_choice


def test_a_race_on_q4_before_the_measurement_asks_for_it():
    from specviz.runtime.race import ran_first_sizes

    words = precision.choice("a model never measured", ["fp32", "bf16", "q4"], kernel=KERNEL)[1]
    assert ran_first_sizes(race_trace(precision_choice=words))   # the worker measures after it, to confirm
    assert not ran_first_sizes(race_trace(precision_choice=precision.kernel_words(KERNEL) + ", and the fastest "
                                                                                            "measured here"))


# -- what changed since the last race, and why ------------------------------------------------------------------


def race_trace(precision_choice: str = "", dtype: str = "q4", sequoia: dict | None = None,
               lookahead: dict | None = None) -> RaceTrace:
    runs = {"ar": RunTrace(method="ar", prompt="p", prompt_token_ids=[1], settings={})}
    for method, settings in (("sequoia", sequoia), ("lookahead", lookahead)):
        if settings is not None:
            runs[method] = RunTrace(method=method, prompt="p", prompt_token_ids=[1], settings=dict(settings))
    return RaceTrace(prompt="p", prompt_token_ids=[1], methods=list(runs), runs=runs, order=[], dtype=dtype,
                     precision_choice=precision_choice)


FIRST_TREE = {"tree": "adaptive", "tree_budget": 24, "tree_depth": 8, "sizing": "first"}
MEASURED_TREE = {"tree": "auto", "tree_budget": 8, "tree_depth": 3}


def test_a_tree_measured_after_a_first_race_is_said_to_have_changed_and_why():
    before = auto_notes.auto_state(race_trace(sequoia=FIRST_TREE))
    after = auto_notes.auto_state(race_trace(sequoia=MEASURED_TREE))
    assert auto_notes.change_words(before, after) == {"sequoia": (
        "auto changed Sequoia's tree from the adaptive tree of up to 24 nodes to 8 nodes x 3 levels since the last "
        "race with these settings: the last race started on first sizes while this machine's forward times were "
        "measured; these are the measured sizes")}
    assert auto_notes.change_words(after, after) == {}            # nothing changed: nothing said
    other_first = auto_notes.auto_state(race_trace(sequoia={**FIRST_TREE, "tree_budget": 8, "tree_depth": 7}))
    assert auto_notes.change_words(before, other_first)["sequoia"].endswith(
        "both started on first sizes, each from its own quick estimate of this machine's forward times, while the "
        "measurement for auto runs")
    assert auto_notes.change_words(None, after) == {}             # no race before
    manual = auto_notes.auto_state(race_trace(sequoia={"tree": "manual", "tree_budget": 4, "tree_depth": 2}))
    assert auto_notes.change_words(before, manual) == {}          # asked-for sizes are not auto's


def test_a_precision_measured_between_races_is_said_with_the_sizes_it_changed():
    rule = precision.NOT_MEASURED + ", so the rule ran"
    before = auto_notes.auto_state(race_trace(rule, "bf16", lookahead={"auto": True, "window": 5, "ngram": 3,
                                                                        "guesses": 5}))
    after = auto_notes.auto_state(race_trace("auto: q4, the fastest measured on this CPU", "q4",
                                             lookahead={"auto": True, "window": 7, "ngram": 4, "guesses": 7}))
    changes = auto_notes.change_words(before, after)
    assert changes["precision"] == ("auto changed the precision from bf16 to q4 since the last race with these "
                                    "settings: this CPU's precisions were measured in between")
    assert changes["lookahead"].startswith("auto changed Lookahead's W, N, G from W=5, N=3, G=5 to W=7, N=4, G=7")
    assert changes["lookahead"].endswith("the precision changed from bf16 to q4, and each precision's forward "
                                         "times are its own")


def test_annotate_remembers_the_last_race_per_settings_and_writes_the_sentences():
    last = auto_notes.LastRaces()
    first = race_trace("auto: bf16, the fastest measured on this CPU", "bf16", sequoia=FIRST_TREE)
    auto_notes.annotate(first, None, "off", last, "key")
    assert auto_notes.CHANGED not in first.runs["sequoia"].settings
    other = race_trace("auto: bf16, the fastest measured on this CPU", "bf16", sequoia=MEASURED_TREE)
    auto_notes.annotate(other, None, "off", last, "other settings")
    assert auto_notes.CHANGED not in other.runs["sequoia"].settings   # another request: no comparison
    second = race_trace("auto: q4, the fastest measured on this CPU", "q4", sequoia=MEASURED_TREE)
    auto_notes.annotate(second, None, "off", last, "key")
    assert second.precision_choice.endswith("; auto changed the precision from bf16 to q4 since the last race with "
                                            "these settings: this CPU's precisions were measured again in between")
    assert "8 nodes x 3 levels" in second.runs["sequoia"].settings[auto_notes.CHANGED]
    back = RaceTrace.from_json(second.to_json())   # kept in the trace: a replay says it too
    from specviz.ui.hardware import auto_notes_html

    shown = htmllib.unescape(auto_notes_html(back))
    assert "auto changed Sequoia's tree from the adaptive tree of up to 24 nodes to 8 nodes x 3 levels" in shown
    assert auto_notes_html(race_trace()) == ""


def test_the_race_events_compare_with_the_last_race_of_the_same_request(pair_fp32, monkeypatch):
    """The engine's race (the worker's, the notebook's) keeps the last race's choices on its pair cache."""
    from specviz.runtime.race import race_events
    from specviz.request import RaceRequest

    sizes = iter(["W=2, N=2, G=1", "W=3, N=2, G=2"])
    monkeypatch.setattr(lookahead_sizing, "auto_size_words", lambda settings: next(sizes))

    class Pairs:
        def __init__(self):
            self.last_races = auto_notes.LastRaces()

        def get(self, target, draft, dtype):
            return pair_fp32

    pairs = Pairs()
    request = RaceRequest(prompt="Say hi", methods=("ar", "lookahead"), dtype="fp32", max_new_tokens=2,
                          lookahead="manual", window=2, ngram=2, guesses=1).validated()
    first = list(race_events(pairs, request))[-1][1]
    second = list(race_events(pairs, request))[-1][1]
    assert auto_notes.CHANGED not in first.runs["lookahead"].settings
    assert second.runs["lookahead"].settings[auto_notes.CHANGED].startswith(
        "auto changed Lookahead's W, N, G from W=2, N=2, G=1 to W=3, N=2, G=2 since the last race")


# -- why a tree is small ----------------------------------------------------------------------------------------


STEEP_TARGET = {1: 10.0, 2: 10.2, 4: 10.6, 8: 18.0, 16: 30.0, 32: 55.0, 64: 105.0}
COSTLY_DRAFT = {1: 6.0, 2: 6.1, 4: 6.3, 8: 7.0, 16: 9.0, 32: 13.0, 64: 21.0}


def one_level_plan() -> dict:
    from specviz.sequoia.sizing import StepCosts, plan_from_curves

    costs = StepCosts(per_level=0.8, per_step=1.0, per_node=0.01, ar_per_step=0.5, per_parent=0.2)
    plan = plan_from_curves([0.7, 0.12, 0.05, 0.02], STEEP_TARGET, COSTLY_DRAFT, 64, 6, costs=costs)
    assert plan["choice"]["tree_depth"] == 1, plan["choice"]   # the sizing's own choice on these curves
    return plan


def numbers(words: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?", words)


def test_a_one_level_tree_is_explained_by_the_numbers_the_sizing_used():
    from specviz.sequoia.sizing import one_level_words

    plan = one_level_plan()
    choice = plan["choice"]
    n = choice["budget"]
    larger = min(r["budget"] for r in plan["table"] if r["budget"] > n)
    best = max((r for r in plan["table"] if r["budget"] == larger), key=lambda r: r["predicted_speedup"])
    level = COSTLY_DRAFT[1] + 0.8 + 0.2
    words = one_level_words(plan)
    assert words.startswith(f"auto chose a one-level tree of {n} nodes: on this machine t(1) = 10.0 ms and "
                            f"t({n}) = {float(plan['target_ms'][str(n)]):.1f} ms")
    assert f"t({larger}) = {float(plan['target_ms'][str(larger)]):.1f} ms" in words
    assert f"a draft level costs {level:.1f} ms (6.0 ms of draft forward, 1.0 ms drawing its tokens)" in words
    assert (f"predicted {choice['predicted_speedup']:.2f}x for this tree against {best['predicted_speedup']:.2f}x "
            f"for the best tree of {larger} nodes") in words
    # Control: a plan whose choice is deeper, or adaptive, says nothing.
    assert one_level_words({**plan, "choice": {**choice, "tree_depth": 3}}) == ""
    assert one_level_words({**plan, "chosen": "adaptive"}) == ""


def test_the_why_sentence_lands_in_the_sequoia_runs_settings():
    plan = one_level_plan()
    settings = {"tree": "auto", "tree_budget": plan["choice"]["budget"], "tree_depth": 1, "plan": plan}
    trace = race_trace(sequoia=settings)
    auto_notes.annotate(trace, None, "off", None, "key")
    from specviz.sequoia.sizing import one_level_words

    assert trace.runs["sequoia"].settings[auto_notes.WHY] == one_level_words(plan)
    from specviz.ui.hardware import auto_notes_html

    assert "auto chose a one-level tree" in htmllib.unescape(auto_notes_html(trace))


def lookahead_result(curve: dict) -> dict:
    from specviz.lookahead import sizing

    return sizing._result("key", sizing.monotone(curve), False)


def test_no_lookahead_candidates_are_explained_by_the_numbers_the_sizing_used():
    result = lookahead_result({1: 10.0, 2: 10.1, 4: 20.0, 8: 40.0, 16: 80.0, 32: 160.0, 64: 320.0})
    choice = result["choice"]
    assert choice["guesses"] == 0   # the sizing's own choice on this curve
    best = next(r for r in result["table"] if r["guesses"] > 0)
    words = lookahead_sizing.lookahead_words(result)
    assert words.startswith(f"auto chose no Lookahead candidates from its n-gram pool (G=0, W={choice['window']}, "
                            f"N={choice['ngram']})")
    # t(n) is the curve's at the step's tokens (a step's expected forward, with a copy's rows, is not t(n)).
    curve = {int(k): v for k, v in result["curve"].items()}
    n, m = choice["step_tokens"], best["step_tokens"]
    assert n == 1 and m == 2, (n, m)   # this curve's choices, so the expected t(n) are the curve's own points
    assert "t(1) = 10.0 ms and its step forwards 1 token," in words
    assert (f"with pool candidates, W={best['window']}, N={best['ngram']}, G={best['guesses']}, forwards "
            f"2 tokens at t(2) = {curve[2]:.1f} ms for {best['expected_tokens']:.2f} tokens "
            f"expected per forward: predicted {best['predicted_speedup']:.2f}x against "
            f"{choice['predicted_speedup']:.2f}x without pool candidates") in words
    # Control: the chosen step's expected forward (10.05 ms here, a copy's rows in some steps) is not called t(1).
    assert choice["forward_ms"] != curve[1] and f"t(1) = {choice['forward_ms']:.1f} ms" not in words
    # Control: a flat curve's choice has candidates, and nothing is said.
    flat = lookahead_result({1: 10.0, 2: 10.0, 4: 10.1, 8: 10.2, 16: 10.5, 32: 11.0, 64: 12.0})
    assert flat["choice"]["guesses"] > 0 and lookahead_sizing.lookahead_words(flat) == ""


def test_the_lookahead_sentence_is_the_choice_the_run_ran(monkeypatch):
    result = lookahead_result({1: 10.0, 2: 10.1, 4: 20.0, 8: 40.0, 16: 80.0, 32: 160.0, 64: 320.0})
    monkeypatch.setattr(lookahead_sizing, "cached_choice", lambda pair, graphs=False: result)
    ran = {k: result["choice"][k] for k in ("window", "ngram", "guesses")}
    assert lookahead_sizing.why_small(None, False, {"auto": True, **ran}) == lookahead_sizing.lookahead_words(result)
    other = {**ran, "window": ran["window"] + 1}   # a cached choice the run did not run: nothing said
    assert lookahead_sizing.why_small(None, False, {"auto": True, **other}) == ""
    assert lookahead_sizing.why_small(None, False, {"auto": False, **ran}) == ""

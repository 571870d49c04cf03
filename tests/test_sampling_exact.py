"""Sampled output follows the target's distribution: every decoder, every draft kind and tree kind.

Each family runs N seeded decodes on tiny random models and compares the first four tokens with the exact
autoregressive distribution, enumerated with an independent reference (`helpers.reference_probs`: float64
and transformers' warpers). The first token comes from the prefill, so a speculative step drafts the 2nd
to 4th, and the fixed tree is four levels deep.

A test that cannot fail proves nothing, so every family also has negative controls at the same N, which
the same check must reject: the autoregressive sampler at a 12% too high temperature (and a power
calculation for that error against every family's target), and for the speculative families a
verification with a planted bug (`mutants.py`: no residual, a rejected token left in q, Lookahead's
fallback drawn from P). The tiny models' logits are scaled so that each setting's distributions are
neither flat (a flat one hides a wrong temperature) nor nearly deterministic (one hides everything).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from helpers import (attach_quantized, cache_forward_curves, chi_square_power, chi_square_pvalue, exact_distribution,
                     sample_sequences, shifted_temperature, tiny_feature_pair, tiny_pair)
from mutants import mutated

from specviz.engine.quant import attach_int8
from specviz.engine.sampling import SamplingConfig
from specviz.trace import SOURCE_COPY, SOURCE_NGRAM

N_SAMPLES = 3000       # chosen by power: see test_the_sample_size_has_power_against_a_wrong_temperature
N_TOKENS = 4
ALPHA = 1e-3           # a test passes at p > ALPHA, a control must give p < ALPHA
EFFECTIVE_SCALE = 14.0  # logits / temperature: a first token's entropy 0.7-1.0 nats (flat would be 1.79)
SAMPLING_TREE = [-1, 0, 0, 0, 1, 1, 2, 4, 4, 7]   # widths up to 3, depth 4
SETTINGS = {"T1": SamplingConfig(1.0), "T0.6-top-p0.9": SamplingConfig(0.6, 0.9)}
CONTROL_SETTING = "T1"   # no top-p: a control is rejected for its distribution, not for leaving the support
WRONG_TEMPERATURE = 1.12
# The feature draft's weights perturbed this much: confident and often wrong, so a first child is rejected
# at a draft probability near 0.6 (0.28 at 0.3), which is what makes a rejected token left in q visible.
FEATURE_NOISE = 1.0


@dataclass(frozen=True)
class Family:
    method: str
    pair: str                              # "independent", "self" or "feature"
    options: dict = field(default_factory=dict)
    prompt: tuple = (1, 2, 3)
    taps: tuple = ()
    mutants: tuple = ()                    # planted bugs this family's controls must reject
    adaptive: bool = False
    weight_only: str = ""                  # "q4" or "int8": the target's layers in that forward's weights
    draft_seed: int = 1                    # the independent draft's weights


SEQUOIA_MUTANTS = ("no-residual", "rejected-left-in-q")
ADAPTIVE = {"tree": "adaptive", "tree_threshold": 0.04, "tree_budget": 10, "tree_depth": 3}
FAMILIES = {
    # AR's one step (graphs on or off: the same step) draws with `draws.sample_unchecked` on the device.
    "ar": Family("ar", "self"),
    "sequoia-independent-fixed": Family("sequoia", "independent", {"tree_parents": SAMPLING_TREE},
                                                     mutants=SEQUOIA_MUTANTS),
    # An adaptive tree's shape follows the draft's ranked probabilities at the tokens drawn above each node
    # (at this threshold the first step's shape varies with the seed): exactness must not depend on it.
    "sequoia-independent-adaptive": Family("sequoia", "independent", ADAPTIVE, mutants=SEQUOIA_MUTANTS,
                                                        adaptive=True),
    "sequoia-feature-fixed": Family("sequoia", "feature", {"tree_parents": SAMPLING_TREE},
                                                 mutants=SEQUOIA_MUTANTS),
    "sequoia-feature-adaptive": Family("sequoia", "feature", ADAPTIVE, mutants=SEQUOIA_MUTANTS,
                                                    adaptive=True),
    # the draft also reads the tiny target's first layer at true positions
    "sequoia-feature-taps-fixed": Family("sequoia", "feature", {"tree_parents": SAMPLING_TREE},
                                                           taps=(0,)),
    "lookahead": Family("lookahead", "self", {"window": 3, "ngram": 3, "guesses": 3, "copies": 0},
                        prompt=(1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2), mutants=("lookahead-device-fallback-raw-p",)),
    # Copied candidates only (G = 0): what the text repeats, verified by the same one-hot rule.
    "lookahead-copied": Family("lookahead", "self", {"window": 3, "ngram": 3, "guesses": 0, "copies": 1},
                               prompt=(1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2), mutants=("lookahead-device-fallback-raw-p",)),
    # A copied chain grafted below a drafted leaf: its one child's q is one-hot (the root's two children are
    # the draft's, so a copy joins only where the draft proposed its first token).
    # The prompt repeats what the tiny target tends to write after it (0 3 0 3), so copies are accepted often.
    # Leaves at depth 1 before a deeper branch: a chain grafted there moves that branch's nodes (and their q)
    # to later numbers when the tree is renumbered breadth first (later steps; the test reads the first's).
    # (This draft seed proposes the copy's first token at the root more often than seed 1: ~11% of runs
    # accept a copied token, against ~2%.)
    "sequoia-copied": Family("sequoia", "independent", {"tree_parents": [-1, 0, 0, 0, 3, 4], "copies": 3},
                             prompt=(1, 2, 3, 0, 3, 0, 3), mutants=SEQUOIA_MUTANTS + ("copy-accepted-outright",),
                             draft_seed=5),
    # A step that verifies the copied chain alone, no draft forward (where the plan says it pays: here always).
    "sequoia-copied-alone": Family("sequoia", "independent", {"tree_parents": [-1, 0, 0, 0, 3, 4], "copies": 3},
                                   prompt=(1, 2, 3, 0, 3, 0, 3), mutants=("copy-accepted-outright-alone",),
                                   draft_seed=5),
    # Prompt lookup: the copied chain verified alone, by Lookahead's one-hot rule (every copy verified: a flat curve).
    "prompt-lookup": Family("prompt-lookup", "self", {"tokens": 3, "curve": {1: 1.0, 64: 1.0}, "curve_source": "prior"},
                            prompt=(1, 2, 3, 0, 3, 0, 3), mutants=("lookahead-device-fallback-raw-p",)),
}
# A wrong temperature is run once, through the autoregressive sampler: every family's target distribution is
# that same tiny target's (after one of two prompts), and the power test below
# shows the check's power against it at N_SAMPLES. (Run for every family on 2026-11-27, each was rejected at p < 1e-10.)
CONTROLS = [("ar", "temperature")] + [(name, kind) for name, fam in FAMILIES.items() for kind in fam.mutants]


def make_pair(family: Family, sampling: SamplingConfig):
    scale = EFFECTIVE_SCALE * sampling.temperature
    if family.pair == "feature":
        return tiny_feature_pair(family.taps, logit_scale=scale, noise=FEATURE_NOISE)
    pair = tiny_pair(draft_seed=None if family.pair == "self" else family.draft_seed, logit_scale=scale)
    if family.weight_only:   # test_sampling_q4.py
        (attach_quantized if family.weight_only == "q4" else attach_int8)(pair.target)
        assert pair.precision == family.weight_only
    return pair


def prepared(family: Family, sampling: SamplingConfig, tmp_path, monkeypatch, name: str = ""):
    pair = make_pair(family, sampling)
    if name == "sequoia-copied":   # every copied token grafted, however rarely it is reached
        from specviz.sequoia import decoder

        monkeypatch.setattr(decoder, "COPY_MIN_REACH", 0.0)
    if name == "sequoia-copied-alone":   # a plan whose tree never beats a copy: every copy is verified alone
        from specviz.sequoia import sizing

        choose = sizing.tree_choice
        plan = {"target_ms": {1: 1.0, 64: 1.0}, "ar_ms_per_token": 1.0, "step_costs": {},
                "choice": {"predicted_speedup": 0.0, "value": 2.0}}

        def with_plan(*args, **kwargs):
            found = choose(*args, **kwargs)
            found.settings["plan"] = plan
            return found

        monkeypatch.setattr(sizing, "tree_choice", with_plan)
    if family.adaptive:   # a cheap draft level, so trees grow deep enough to test
        monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
        cache_forward_curves(pair)
    return pair, exact_distribution(pair.target, list(family.prompt), sampling, N_TOKENS)


class StepRecorder:
    """What the speculative steps did, so a passing test shows it exercised what it claims."""

    def __init__(self):
        self.first_depths, self.tree_depths, self.shapes, self.ngram_runs, self.copy_runs = [], [], set(), 0, 0

    def __call__(self, trace):
        payload = trace.steps[1].payload
        if hasattr(payload, "accepted_path"):
            self.first_depths.append(len(payload.accepted_path))
            self.tree_depths.append(payload.depth)
            # Every step's tree: an adaptive tree's shape follows the tokens drawn (in the first step's one
            # context it varies with the seed at T=1, not at T=0.6, where the draft is surer).
            self.shapes.update(tuple(n.parent for n in step.payload.nodes) for step in trace.steps[1:]
                               if step.payload is not None)   # prompt lookup's step without a match has none
        self.ngram_runs += any(s == SOURCE_NGRAM for st in trace.steps for s in st.token_sources)
        self.copy_runs += any(s == SOURCE_COPY for st in trace.steps for s in st.token_sources)


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_sampling_is_exact(one_thread, tmp_path, monkeypatch, family, setting):
    fam, sampling = FAMILIES[family], SETTINGS[setting]
    pair, exact = prepared(fam, sampling, tmp_path, monkeypatch, family)
    steps = StepRecorder()
    samples = sample_sequences(fam.method, pair, list(fam.prompt), sampling, N_SAMPLES, N_TOKENS, on_trace=steps,
                               **fam.options)
    assert chi_square_pvalue(samples, exact) > ALPHA
    if fam.options.get("copies") or fam.method == "prompt-lookup":   # copied tokens were verified, and accepted
        assert steps.copy_runs > N_SAMPLES // 20, steps.copy_runs
    if family.startswith("sequoia-copied"):   # the copy reached past the drafted tree's first level
        assert max(steps.first_depths) >= 2, steps.first_depths
    elif fam.method == "sequoia":
        # The first speculative step drafted the 2nd token on: some steps stop at once, some go deep.
        assert min(steps.first_depths) == 0 and max(steps.first_depths) >= 2, steps.first_depths
        if not fam.adaptive:   # four levels: a depth-3 path drafts the 2nd to 4th tokens
            assert min(steps.tree_depths) == 4 and max(steps.first_depths) >= 3, steps.first_depths
        # An adaptive tree grows a level only where it pays (at T=0.6 the independent draft's stop at two).
        assert len(steps.shapes) >= (2 if fam.adaptive else 1)   # the shape itself depended on the draws
    if fam.method == "lookahead" and not fam.options.get("copies"):
        assert steps.ngram_runs > N_SAMPLES // 10, steps.ngram_runs   # candidates were verified and accepted


@pytest.mark.slow
@pytest.mark.parametrize("family,control", CONTROLS)
def test_negative_control_is_rejected(one_thread, tmp_path, monkeypatch, family, control):
    """The same check at the same sample size rejects a sampler that is only slightly wrong."""
    fam, sampling = FAMILIES[family], SETTINGS[CONTROL_SETTING]
    pair, exact = prepared(fam, sampling, tmp_path, monkeypatch, family)
    if control == "temperature":
        samples = sample_sequences(fam.method, pair, list(fam.prompt), shifted_temperature(sampling, WRONG_TEMPERATURE),
                                   N_SAMPLES, N_TOKENS, **fam.options)
    else:
        with mutated(control):
            samples = sample_sequences(fam.method, pair, list(fam.prompt), sampling, N_SAMPLES, N_TOKENS,
                                       **fam.options)
    p_value = chi_square_pvalue(samples, exact, control=True)
    print(f"\nnegative control {family} / {control}: p = {p_value:.3g}")
    assert p_value < ALPHA, p_value


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_the_sample_size_has_power_against_a_wrong_temperature(setting):
    """At N_SAMPLES the chi-square rejects a 12% too high temperature with probability >= 0.99 (noncentral
    chi-square over the test's own pooled cells), in every setting and after every prompt the tests run."""
    sampling = SETTINGS[setting]
    model = make_pair(FAMILIES["ar"], sampling).target
    for prompt in {fam.prompt for fam in FAMILIES.values()}:
        exact = exact_distribution(model, list(prompt), sampling, N_TOKENS)
        wrong = exact_distribution(model, list(prompt), shifted_temperature(sampling, WRONG_TEMPERATURE), N_TOKENS)
        assert chi_square_power(exact, wrong, N_SAMPLES, ALPHA) >= 0.99, prompt


def test_the_sync_free_draw_is_exact():
    """`draws.race_sample` (the static walks' one draw with no host read) follows its distribution, rows at a
    time, and the same check rejects it with its clocks of the wrong law (the mutant `race-sample-flattened`)."""
    import torch
    from scipy.stats import chisquare

    from specviz import draws

    probs = torch.tensor([0.02, 0.08, 0.15, 0.25, 0.5, 0.0])   # a token of no mass is never drawn
    n = 20_000

    def p_value() -> float:
        drawn = draws.race_sample(probs.expand(n, -1), torch.Generator().manual_seed(3))
        counts = torch.bincount(drawn, minlength=len(probs))
        assert counts[-1] == 0
        return float(chisquare(counts[:-1].numpy(), (probs[:-1] * n).numpy()).pvalue)

    assert p_value() > ALPHA
    with mutated("race-sample-flattened"):
        assert p_value() < ALPHA


def test_every_mutant_can_still_be_planted():
    """The controls and `scripts/mutation_check.py` plant these bugs by rewriting source text: after a
    refactor that moved the text, this fails and names the mutant to re-point, rather than testing nothing."""
    from mutants import MUTANTS

    for mutant in MUTANTS:
        with mutated(mutant.name):
            pass

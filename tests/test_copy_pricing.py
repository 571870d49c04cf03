"""Sequoia's copy-only step priced on `auto`'s plan (`sequoia.copy_cost.CopyPricing`): pure, no model."""

from __future__ import annotations

import pytest

from specviz.sequoia.copy_cost import PRIOR_STEPS, CopyPricing

PLAN = {"target_ms": {1: 1.0, 2: 1.1, 4: 1.2, 8: 1.6}, "ar_ms_per_token": 1.1,
        "step_costs": {"per_step": 0.1, "per_node": 0.01}, "choice": {"predicted_speedup": 1.3, "value": 2.0}}


def test_a_copy_step_is_priced_on_the_plans_curve_and_costs():
    pricing = CopyPricing(PLAN)
    speedup, length = pricing.best_step([0.9, 0.8, 0.7])
    # Three likely tokens for t(4) and the step's costs: (1 + 2.4) * 1.1 / (1.2 + 0.1 + 0.04).
    assert length == 3 and speedup == pytest.approx(3.4 * 1.1 / 1.34)
    steep = CopyPricing({**PLAN, "target_ms": {1: 1.0, 2: 3.0, 8: 9.0}})
    assert steep.best_step([0.5, 0.4])[1] == 1 and steep.best_step([0.5, 0.4])[0] < 1.0   # priced, not a win


def test_the_bar_a_copy_must_beat_is_the_tree_as_this_run_drafts_it():
    pricing = CopyPricing(PLAN)
    assert pricing.tree_speedup_at(0, 0) == pytest.approx(1.3)   # nothing drafted yet: the plan's own figure
    # A text the draft follows poorly (a rewrite): 1.25 tokens a step over 12 drafted steps lowers the bar...
    low = pricing.tree_speedup_at(12, 15)
    assert low == pytest.approx(1.3 * ((2.0 * PRIOR_STEPS + 15) / (PRIOR_STEPS + 12)) / 2.0) and low < 1.1
    # ... one it follows well raises it, and the plan's figure weighs as PRIOR_STEPS steps, not more.
    assert pricing.tree_speedup_at(12, 36) > 1.3
    assert pricing.tree_speedup_at(1, 1) > pricing.tree_speedup_at(2, 2) > 1.0
    # A plan that does not give its tokens per step (pinned before it did) keeps its own figure.
    unsaid = CopyPricing({**PLAN, "choice": {"predicted_speedup": 1.3}})
    assert unsaid.tree_speedup_at(12, 15) == pytest.approx(1.3)

"""The worksheet's arithmetic (docs/worksheet.md) recomputed from the shipped acceptance vector, the tree DP and
the rules: a figure it quotes that these do not give fails here (the measured ones name their machine and day)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.sequoia.tree_dp import optimal_tree

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "worksheet.md").read_text()
SHIPPED = json.loads((ROOT / "assets" / "acceptance" / "smollm2-135m-feature-draft-T0.json").read_text())


def quoted(value: float, places: int = 3) -> str:
    return f"**{value:.{places}f}**"


def chain(alpha: float, guesses: int) -> float:
    return (1 - alpha ** (guesses + 1)) / (1 - alpha)


def test_the_vector_the_worksheet_quotes_is_the_shipped_one():
    p = SHIPPED["acceptance"]
    assert "p = (" + ", ".join(f"{x:.4f}" for x in p) + ")" in PAGE
    assert f"sum to {sum(p):.3f}" in PAGE and f"({1 - sum(p):.3f})" in PAGE
    by_depth = ", ".join(f"{row[0]:.4f}" for row in SHIPPED["acceptance_by_depth"][:3])
    assert by_depth in PAGE


def test_chains_trees_and_conditional_rates_are_what_the_dp_and_the_vector_give():
    p = SHIPPED["acceptance"]
    a = p[0]
    assert quoted(chain(a, 4)) in PAGE and f"({optimal_tree(p, 5, 4).value:.4f})" in PAGE
    assert optimal_tree(p, 5, 4).parents == [-1, 0, 1, 2, 3]   # the chain is the best 5-node tree
    reach, by_depth = 1.0, 1.0
    for row in SHIPPED["acceptance_by_depth"]:
        reach *= row[0]
        by_depth += reach
    assert quoted(by_depth) in PAGE
    best8 = optimal_tree(p, 8, 7)
    assert quoted(chain(a, 7)) in PAGE and quoted(best8.value) in PAGE
    assert f"parents {', '.join(str(x).replace('-', '−') for x in best8.parents)}" in PAGE
    assert quoted(p[1] / (1 - p[0])) in PAGE and quoted(p[2] / (1 - p[0] - p[1])) in PAGE


def test_the_residual_exercise_follows_the_verification_rule():
    """Exercise 4 by `sequoia_reference`'s rule: the package's walk tests a later sibling this way."""
    import torch
    from sequoia_reference import residual

    P, q = torch.tensor([0.40, 0.35, 0.25], dtype=torch.float64), torch.tensor([0.50, 0.45, 0.05], dtype=torch.float64)
    assert quoted(min(1.0, float(P[1] / q[1]))) in PAGE
    P2 = residual(P, q)
    q2 = q.clone()
    q2[1] = 0
    q2 /= q2.sum()
    assert P2.tolist() == pytest.approx([0, 0, 1]) and f"({float(q2[0]):.3f}, 0, {float(q2[2]):.3f})" in PAGE
    assert quoted(min(1.0, float(P2[0] / q2[0])), 0) in PAGE
    assert residual(P2, q2).tolist() == pytest.approx([0, 0, 1])


def test_leviathans_speedups_are_the_formulas():
    a, gamma = SHIPPED["acceptance"][0], 2
    tokens = chain(a, gamma)
    assert quoted(tokens) in PAGE
    assert quoted(tokens / (1 + gamma * 0.04), 2) in PAGE and quoted(tokens / (1 + gamma * 0.23), 2) in PAGE
    assert quoted(tokens / (1.15 + gamma * 0.23), 2) in PAGE

"""Sequoia's verification rules alone, without a model."""

import itertools

import pytest
import torch
from scipy import stats

from specviz.sequoia.verify import (
    ACCEPTED,
    NOT_REACHED,
    REJECTED,
    ROOT,
    greedy_walk,
    residual,
    sampling_walk,
    verify_children,
)


def without_replacement_sequences(q: torch.Tensor, c: int):
    """Every ordered draw of c distinct tokens from q, with its probability."""
    vocab = q.numel()
    for seq in itertools.permutations(range(vocab), c):
        prob, mass = 1.0, 1.0
        for tok in seq:
            if mass <= 0:
                prob = 0.0
                break
            prob *= float(q[tok]) / mass
            mass -= float(q[tok])
        if prob > 0:
            yield list(seq), prob


def exact_output_distribution(p: torch.Tensor, q: torch.Tensor, c: int) -> torch.Tensor:
    """P(the token the node emits = t), enumerating draws and accept/reject branches of the rule."""
    out = torch.zeros_like(p, dtype=torch.float64)

    def branch(p_cur, q_cur, seq, i, weight):
        if i == len(seq):
            out.add_(weight * p_cur.double())          # all rejected: the bonus from the residual
            return
        tok = seq[i]
        accept = min(1.0, float(p_cur[tok]) / float(q_cur[tok]))
        out[tok] += weight * accept
        if accept < 1.0:
            q_next = q_cur.clone()
            q_next[tok] = 0.0
            q_next = q_next / q_next.sum() if q_next.sum() > 0 else q_next
            branch(residual(p_cur, q_cur), q_next, seq, i + 1, weight * (1 - accept))

    for seq, prob in without_replacement_sequences(q, c):
        branch(p.clone(), q.clone(), seq, 0, prob)
    return out


@pytest.mark.parametrize("seed,c", [(0, 1), (1, 2), (2, 3), (3, 4)])
def test_rule_is_exact_by_enumeration(seed, c):
    gen = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(5, generator=gen, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(5, generator=gen, dtype=torch.float64) * 2, -1)
    dist = exact_output_distribution(p, q, c)
    assert torch.allclose(dist, p, atol=1e-12)


def test_verify_children_matches_target_by_sampling():
    gen = torch.Generator().manual_seed(7)
    p = torch.softmax(torch.randn(6, generator=gen) * 2, -1)
    q = torch.softmax(torch.randn(6, generator=gen) * 2, -1)
    counts = torch.zeros(6)
    trials = 4000
    for _ in range(trials):
        kids = torch.multinomial(q, 3, replacement=False, generator=gen).tolist()
        hit, p_final = verify_children(p, q, kids, torch.rand(3, generator=gen).tolist())
        tok = kids[hit] if hit is not None else int(torch.multinomial(p_final, 1, generator=gen))
        counts[tok] += 1
    assert stats.chisquare(counts.numpy(), (p * trials).numpy()).pvalue > 1e-3


def test_residual_falls_back_when_empty():
    p = torch.tensor([0.5, 0.5, 0.0])
    assert torch.equal(residual(p, p.clone()), p)
    r = residual(p, torch.tensor([0.8, 0.1, 0.1]))
    assert torch.allclose(r, torch.tensor([0.0, 1.0, 0.0]))


def test_children_with_zero_draft_probability_are_skipped():
    # The draft's support ran out: token 2 was not really drawn and must never be accepted.
    p = torch.tensor([0.0, 0.0, 1.0])
    q = torch.tensor([0.6, 0.4, 0.0])
    hit, p_final = verify_children(p, q, [0, 2], [0.0, 0.0])
    assert hit is None
    assert torch.allclose(p_final, torch.tensor([0.0, 0.0, 1.0]))


def test_greedy_walk():
    #        0
    #      1   2        tokens: 1->7, 2->8, 3->9, 4->5, 5->9
    #     3 4   5
    children = [[1, 2], [3, 4], [5], [], [], []]
    tokens = [0, 7, 8, 9, 5, 9]
    argmax = [8, 0, 9, 0, 0, 4]
    walk = greedy_walk(children, tokens, argmax)
    assert walk.accepted == [2, 5] and walk.bonus_token == 4
    assert walk.statuses(6) == [ROOT, REJECTED, ACCEPTED, NOT_REACHED, NOT_REACHED, ACCEPTED]
    walk = greedy_walk(children, tokens, [3, 0, 0, 0, 0, 0])
    assert walk.accepted == [] and walk.bonus_token == 3


def test_sampling_walk_accepts_everything_when_draft_is_target():
    children = [[1], [2], []]
    tokens = [0, 1, 2]
    p = torch.softmax(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), -1)
    # q equals P at every node, so min(1, P/q) = 1 for every drawn child.
    walk = sampling_walk(children, tokens, p, {0: p[0], 1: p[1]}, torch.Generator().manual_seed(1))
    assert walk.accepted == [1, 2] and walk.rejected == []


# -- the samplers the rules draw with ------------------------------------------------------


def test_inverse_cdf_sample_follows_the_distribution_and_never_draws_zero_mass():
    from specviz.draws import sample

    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([0.0, 0.2, 0.0, 0.5, 0.25, 0.05, 0.0])
    draws = sample(p.expand(40000, -1).contiguous() * 3.0, gen)   # unnormalised rows are fine
    counts = torch.bincount(draws, minlength=p.numel()).double()
    assert counts[p == 0].sum() == 0
    keep = p > 0
    assert stats.chisquare(counts[keep].numpy(), (p[keep].double() * counts.sum()).numpy()).pvalue > 1e-3
    # A row whose mass is all on its last positive token: the rounding guard must not step past it.
    assert sample(torch.tensor([[0.0, 1.0, 0.0, 0.0]]), gen).item() == 1


def test_gumbel_top_k_with_the_fast_noise_draws_without_replacement_exactly():
    # The draft's children at a node: the top-c of q / E, E ~ Exp(1), is c draws without replacement.
    from specviz.draws import exponential_like

    gen = torch.Generator().manual_seed(1)
    q = torch.tensor([0.45, 0.3, 0.15, 0.1, 0.0])
    n = 30000
    noise = exponential_like(q.expand(n, -1).contiguous(), gen)
    assert torch.isfinite(q / noise).all() and (noise > 0).all()
    pairs = (q / noise).topk(2, dim=-1).indices
    observed = {}
    for a, b in pairs.tolist():
        observed[(a, b)] = observed.get((a, b), 0) + 1
    expected = {tuple(seq): prob for seq, prob in without_replacement_sequences(q, 2)}
    assert set(observed) <= set(expected)   # no pair with a zero-mass token
    keys = sorted(expected)
    total = sum(expected.values())
    assert stats.chisquare([observed.get(k, 0) for k in keys], [expected[k] / total * n for k in keys]).pvalue > 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_first_argmax_picks_the_first_maximum_like_argmax(dtype):
    """The greedy rule every decoder shares: ties go to the lowest token id, as argmax does."""
    from specviz.draws import first_argmax

    gen = torch.Generator().manual_seed(0)
    logits = torch.randint(0, 4, (64, 300), generator=gen).to(dtype)   # many ties per row
    logits[5, [7, 250]] = 9
    assert torch.equal(first_argmax(logits), logits.argmax(dim=-1))
    assert int(first_argmax(logits)[5]) == 7
    assert torch.equal(first_argmax(logits.view(8, 8, 300)), logits.view(8, 8, 300).argmax(dim=-1))

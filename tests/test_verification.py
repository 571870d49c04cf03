"""Sequoia's verification rules alone, without a model.

The package's walks run on the device (`specviz.sequoia.verify`); they are checked here by enumerating
every branch against the target's exact distribution, and case by case against the plain host walk of
`sequoia_reference` (itself checked by enumeration), which states the same rules independently.
"""

import itertools
import random

import pytest
import torch
from scipy import stats
from sequoia_reference import greedy_walk as host_greedy_walk
from sequoia_reference import residual, verify_children
from sequoia_reference import sampling_walk as host_sampling_walk

import specviz.sequoia.verify as verify
from specviz.sequoia.tree import TreeShape
from specviz.sequoia.verify import (
    ACCEPTED,
    NOT_REACHED,
    REJECTED,
    ROOT,
    STATUS_NAMES,
    WalkTables,
    greedy_walk,
    greedy_walk_on_host,
    sampled_walk,
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


def acceptance_threshold(accepted) -> float:
    """The u under which `accepted(u)` holds. A child is accepted exactly when its uniform falls below a
    threshold (min(1, P / q) by the rule), so bisection finds it from the function's decisions alone."""
    if not accepted(0.0):
        return 0.0
    if accepted(1.0):
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(48):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if accepted(mid) else (lo, mid)
    return 1.0 if hi == 1.0 else (lo + hi) / 2   # u < 1 always accepts: a threshold of 1 (P >= q)


class RecordedBonus:
    """Stands in for the device walk's bonus draw: records the P it would draw from, returns token 0."""

    def __init__(self):
        self.p = None

    def __call__(self, p, generator=None):
        self.p = p.double().clone()
        return torch.zeros((), dtype=torch.long)


def device_walk(monkeypatch, shape: TreeShape, tokens, target_probs, draft_q, uniforms, limit=None, prune=False):
    """The package's sampled walk with the bonus recorded: (accepted node ids, status names, bonus P);
    `prune`: as a CPU runs it (the moot work skipped)."""
    bonus = RecordedBonus()
    monkeypatch.setattr(verify, "race_sample", bonus)
    walk = sampled_walk(WalkTables(shape, "cpu"), torch.as_tensor(tokens), target_probs, draft_q,
                        torch.as_tensor(uniforms, dtype=torch.float64),
                        shape.depth if limit is None else limit, None, prune=prune)
    monkeypatch.undo()
    k = int(walk.accepted)
    return walk.path.tolist()[1:k + 1], [STATUS_NAMES[c] for c in walk.status.tolist()], bonus.p


def emitted_by_device_walk(monkeypatch, p: torch.Tensor, q: torch.Tensor, c: int, prune: bool = False) -> torch.Tensor:
    """P(the token one node emits = t), enumerating every ordered draw of c children from q and every
    accept/reject branch of the package's walk over a root with c children; each branch's probability
    comes from the threshold its decisions reveal, and the bonus from the P the walk draws it from."""
    shape = TreeShape.from_parents([-1] + [0] * c)
    out = torch.zeros_like(p, dtype=torch.float64)
    for seq, prob in without_replacement_sequences(q, c):
        tokens = [0] + seq
        target_probs = p.expand(c + 1, -1)
        rejecting: list[float] = []   # uniforms that reject the children tested so far
        weight = prob
        for i, tok in enumerate(seq):
            def accepted(u, i=i):
                got, _, _ = device_walk(monkeypatch, shape, tokens, target_probs, q.view(1, -1),
                                        [rejecting + [u] + [1.0] * (c - i - 1)], prune=prune)
                return got == [i + 1]
            t = acceptance_threshold(accepted)
            out[tok] += weight * t
            weight *= 1 - t
            if weight == 0:
                break
            rejecting.append((t + 1) / 2)
        else:
            got, _, p_bonus = device_walk(monkeypatch, shape, tokens, target_probs, q.view(1, -1), [rejecting],
                                          prune=prune)
            assert got == []
            out += weight * p_bonus
    return out


@pytest.mark.parametrize("prune", [False, True], ids=["as-captured", "pruned-on-cpu"])
@pytest.mark.parametrize("seed,c", [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)])
def test_device_walk_at_one_node_is_exact_by_enumeration(monkeypatch, seed, c, prune):
    gen = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(5, generator=gen, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(5, generator=gen, dtype=torch.float64) * 2, -1)
    p[int(p.argmin())] = 0.0   # a token the target never emits, which the draft offers
    p /= p.sum()
    torch.testing.assert_close(emitted_by_device_walk(monkeypatch, p, q, c, prune), p, atol=1e-10, rtol=0)


def walk_outcomes(monkeypatch, shape: TreeShape, tokens, target_probs, draft_q):
    """[(probability, accepted node ids, bonus distribution)] over every branch of the package's walk.

    The walk tests at most one node per level, with that level's row of uniforms: a branch is explored
    by fixing the rows of the levels decided so far."""
    width = max(len(c) for c in shape.children) or 1
    outcomes = []

    def run(script):
        rows = script + [[0.5] * width] * (max(shape.depth, 1) - len(script))
        return device_walk(monkeypatch, shape, tokens, target_probs, draft_q, rows)

    def explore(script, weight):
        accepted, _, bonus_p = run(script)
        k = len(script)   # the level this branch decides
        kids = shape.children[0 if k == 0 else accepted[k - 1]] if len(accepted) >= k else []
        if k >= shape.depth or not kids:
            outcomes.append((weight, accepted, bonus_p))
            return
        rejecting = []
        for i, kid in enumerate(kids):
            def hit(u, i=i, kid=kid):
                got, _, _ = run(script + [rejecting + [u] + [1.0] * (width - i - 1)])
                return len(got) > k and got[k] == kid
            t = acceptance_threshold(hit)
            if t > 0:
                explore(script + [rejecting + [t / 2] + [0.5] * (width - i - 1)], weight * t)
            weight *= 1 - t
            if weight == 0:
                return
            rejecting.append((t + 1) / 2)
        explore(script + [rejecting + [1.0] * (width - len(rejecting))], weight)

    explore([], 1.0)
    return outcomes


def test_sampling_walk_is_exact_by_enumeration(monkeypatch):
    """Every tree a draft can draw (root with two children, the first with one), every branch of the
    package's walk:
    the first three tokens (continued by the target where the walk emits fewer) follow the target."""
    vocab = 4
    gen = torch.Generator().manual_seed(11)
    table_p = torch.softmax(torch.randn(vocab + 1, vocab + 1, vocab, generator=gen, dtype=torch.float64) * 2, -1)
    table_q = torch.softmax(torch.randn(vocab + 1, vocab + 1, vocab, generator=gen, dtype=torch.float64) * 2, -1)

    def target(ctx):   # P after the context (up to two tokens), a fixed random table
        padded = (vocab, vocab, *ctx)[-2:]
        return table_p[padded[0], padded[1]]

    def draft(ctx):
        padded = (vocab, vocab, *ctx)[-2:]
        return table_q[padded[0], padded[1]]

    parents = [-1, 0, 0, 1]
    shape = TreeShape.from_parents(parents)
    emitted: dict[tuple, float] = {}
    for (a, b), p_ab in without_replacement_sequences(draft(()), 2):
        for (c,), p_c in without_replacement_sequences(draft((a,)), 1):
            tokens = [0, a, b, c]
            paths = [(), (a,), (b,), (a, c)]
            target_probs = torch.stack([target(path) for path in paths])
            draft_q = torch.stack([draft(()), draft((a,))])   # by node id: the nodes with children
            for weight, accepted, bonus_p in walk_outcomes(monkeypatch, shape, tokens, target_probs, draft_q):
                assert [parents[n] for n in accepted] == ([0] + accepted)[:len(accepted)]   # a path from the root
                head = tuple(tokens[n] for n in accepted)
                for bonus in range(vocab):
                    for seq, p in continued(head + (bonus,), 3, target):
                        emitted[seq] = emitted.get(seq, 0.0) + p_ab * p_c * weight * float(bonus_p[bonus]) * p
    for seq in itertools.product(range(vocab), repeat=3):
        exact = float(target(())[seq[0]] * target(seq[:1])[seq[1]] * target(seq[:2])[seq[2]])
        assert abs(emitted.get(seq, 0.0) - exact) < 1e-9, (seq, emitted.get(seq), exact)


def continued(seq: tuple, length: int, target):
    """The sequence cut or continued by the target to `length` tokens, with the continuation's probability."""
    if len(seq) >= length:
        yield seq[:length], 1.0
        return
    for tok in range(int(target(()).numel())):
        for longer, p in continued(seq + (tok,), length, target):
            yield longer, float(target(seq)[tok]) * p


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


def test_reference_greedy_walk():
    #        0
    #      1   2        tokens: 1->7, 2->8, 3->9, 4->5, 5->9
    #     3 4   5
    children = [[1, 2], [3, 4], [5], [], [], []]
    tokens = [0, 7, 8, 9, 5, 9]
    argmax = [8, 0, 9, 0, 0, 4]
    walk = host_greedy_walk(children, tokens, argmax)
    assert walk.accepted == [2, 5] and walk.bonus_token == 4
    assert walk.statuses(6) == [ROOT, REJECTED, ACCEPTED, NOT_REACHED, NOT_REACHED, ACCEPTED]
    walk = host_greedy_walk(children, tokens, [3, 0, 0, 0, 0, 0])
    assert walk.accepted == [] and walk.bonus_token == 3


def test_sampled_walk_accepts_everything_when_draft_is_target(monkeypatch):
    shape = TreeShape.from_parents([-1, 0, 1])
    p = torch.softmax(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), -1)
    # q equals P at every node, so min(1, P/q) = 1 for every drawn child.
    accepted, status, _ = device_walk(monkeypatch, shape, [0, 1, 2], p, p[:2], [[0.99], [0.99]])
    assert accepted == [1, 2] and REJECTED not in status


def random_tree(rng: random.Random, size: int, max_children: int = 3) -> list[int]:
    """A breadth-first parent list: each node in order takes 0..max_children children."""
    parents, frontier = [-1], [0]
    while len(parents) < size and frontier:
        nxt = []
        for node in frontier:
            for _ in range(rng.randint(0 if node else 1, max_children)):
                if len(parents) < size:
                    parents.append(node)
                    nxt.append(len(parents) - 1)
        frontier = nxt
    return parents


def distinct_children_tokens(rng: random.Random, shape: TreeShape, vocab: int) -> list[int]:
    tokens = [0] * shape.size
    for kids in shape.children:   # siblings are distinct draws
        for kid, tok in zip(kids, rng.sample(range(vocab), len(kids))):
            tokens[kid] = tok
    return tokens


def device_greedy_walk(shape, tokens, picks, limit):
    return greedy_walk(WalkTables(shape, "cpu"), torch.tensor(tokens), torch.tensor(picks), limit)


def greedy_walk_followed_on_host(shape, tokens, picks, limit):
    return greedy_walk_on_host(shape, tokens, picks, limit, "cpu")


GREEDY_WALKS = pytest.mark.parametrize("walk_of", [device_greedy_walk, greedy_walk_followed_on_host],
                                       ids=["device", "host"])


@GREEDY_WALKS
def test_greedy_walk_equals_the_reference_on_random_trees(walk_of):
    rng = random.Random(0)
    vocab = 4
    for _ in range(300):
        shape = TreeShape.from_parents(random_tree(rng, rng.randint(1, 14)))
        tokens = distinct_children_tokens(rng, shape, vocab)
        picks = [rng.randrange(vocab) for _ in range(shape.size)]
        limit = rng.randint(0, shape.depth)
        host_shape = shape.truncated(limit)
        want = host_greedy_walk(host_shape.children, tokens, picks)
        got = walk_of(shape, tokens, picks, limit)
        k = int(got.accepted)
        assert got.path.tolist()[1:k + 1] == want.accepted and int(got.bonus) == want.bonus_token
        assert got.path.tolist()[k + 1:] == [got.path.tolist()[k]] * (shape.depth - k)   # padded by repeating
        status = [STATUS_NAMES[c] for c in got.status.tolist()]
        assert status[:host_shape.size] == want.statuses(host_shape.size)


def test_the_walk_followed_on_the_host_is_the_device_walk_to_the_dtype():
    # What the decoder reads of a walk on a CPU (`greedy_walk_on_host`) against what it reads elsewhere: every
    # field, its values, dtype and length, on trees cut short of their depth as a run's last steps cut them.
    rng = random.Random(1)
    for _ in range(200):
        shape = TreeShape.from_parents(random_tree(rng, rng.randint(1, 12)))
        tokens = distinct_children_tokens(rng, shape, 3)
        picks = [rng.randrange(3) for _ in range(shape.size)]
        limit = rng.randint(0, shape.depth)
        device, host = device_greedy_walk(shape, tokens, picks, limit), greedy_walk_followed_on_host(shape, tokens, picks, limit)
        for name in ("path", "accepted", "bonus", "status", "tests"):
            want, got = getattr(device, name), getattr(host, name)
            assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want), name


class ScriptedHostDraws:
    """The reference walk's draws from a table: node at level k reads row k of the device walk's
    uniforms (its first len(children) entries); the bonus P recorded, not sampled."""

    def __init__(self, uniforms: torch.Tensor):
        self.uniforms, self.calls, self.bonus_p = uniforms, 0, None

    def rand(self, n, generator=None, device=None):
        row = self.uniforms[self.calls, :n]
        self.calls += 1
        return row

    def sample(self, p, generator=None):
        self.bonus_p = p.double().clone()
        return torch.tensor(0)


@pytest.mark.parametrize("prune", [False, True], ids=["as-captured", "pruned-on-cpu"])
def test_sampled_walk_equals_the_reference_on_random_trees(monkeypatch, prune):
    """Same tree, P, q and uniforms: the device walk accepts, rejects and leaves for the bonus the P the
    host walk does, on random trees (zero-mass tokens, cut depths, draft supports that run out), whether it
    runs every loop (as captured) or skips the moot work (as a CPU runs it)."""
    import sequoia_reference

    rng = random.Random(1)
    gen = torch.Generator().manual_seed(1)
    vocab = 5
    for case in range(300):
        shape = TreeShape.from_parents(random_tree(rng, rng.randint(1, 12)))
        limit = rng.randint(0, shape.depth)
        tokens = distinct_children_tokens(rng, shape, vocab)
        p = torch.softmax(torch.randn(shape.size, vocab, generator=gen, dtype=torch.float64) * 2, -1)
        q = torch.softmax(torch.randn(shape.size, vocab, generator=gen, dtype=torch.float64) * 2, -1)
        if case % 3 == 0:   # targets that never emit a token, drafts whose support ran out
            p[:, rng.randrange(vocab)] = 0.0
            q[:, rng.randrange(vocab)] = 0.0
            p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
        width = max(1, max(len(c) for c in shape.children))
        uniforms = torch.rand(max(shape.depth, 1), width, generator=gen, dtype=torch.float64)
        accepted, status, bonus_p = device_walk(monkeypatch, shape, tokens, p, q, uniforms, limit, prune)
        host_shape = shape.truncated(limit)
        draws = ScriptedHostDraws(uniforms)
        shim = type("TorchWithScriptedRand", (), {"rand": staticmethod(draws.rand),
                                                  "__getattr__": lambda self, name: getattr(torch, name)})()
        monkeypatch.setattr(sequoia_reference, "torch", shim)
        monkeypatch.setattr(sequoia_reference, "sample", draws.sample)
        want = host_sampling_walk(host_shape.children, tokens, p, {i: q[i] for i in range(shape.size)}, None)
        monkeypatch.undo()
        assert accepted == want.accepted, case
        assert status[:host_shape.size] == want.statuses(host_shape.size), case
        torch.testing.assert_close(bonus_p, draws.bonus_p, atol=1e-12, rtol=0)


# -- the samplers the rules draw with ------------------------------------------------------


def test_inverse_cdf_sample_follows_the_distribution_and_never_draws_zero_mass():
    from helpers import sample

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


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("scale", [1.0, 1 / 0.7])
def test_logit_summary_is_the_first_maximum_topk_and_logsumexp(native, scale, monkeypatch):
    """The one op behind every CPU step's greedy token, the narration's top alternatives and their
    probabilities (`native.logit_summary`): index 0 is the first maximum, as `first_argmax` picks it, even
    among ties; the rest is torch's topk; the norm is logsumexp. Against torch on both paths (the kernel's,
    where it is built, and torch's)."""
    from specviz.draws import first_argmax
    from specviz.engine import native as native_ops

    if native and native_ops.q4_rows_available() is not None:
        pytest.skip(native_ops.q4_rows_available())
    if not native:
        monkeypatch.setattr(native_ops, "q4_rows_available", lambda: "torch's path")
    gen = torch.Generator().manual_seed(0)
    ties = torch.randint(0, 4, (64, 300), generator=gen).float()   # many ties per row
    ties[5, [7, 250]] = 9
    wide = torch.randn(3, 49152, generator=gen) * 4
    for logits, k in ((ties, 1), (ties, 3), (wide, 1), (wide, 8), (ties[:, :17], 5)):
        values, indices, norms = native_ops.logit_summary(logits, k, scale)
        scores = logits * scale
        assert torch.equal(indices[:, 0], first_argmax(scores))
        torch.testing.assert_close(values, scores.topk(k, dim=-1).values)
        assert torch.equal(scores.gather(1, indices), values)   # each value is its index's
        torch.testing.assert_close(norms, scores.logsumexp(dim=-1), rtol=0, atol=2e-5)
    assert int(native_ops.logit_summary(ties, 2, scale)[1][5, 0]) == 7


def recomputed_tests(shape: TreeShape, tokens, p, q, uniforms, accepted: list[int], limit: int):
    """Each node's test as the rule defines it, recomputed on the host from the full distributions along the
    path the walk took: (accept_prob, uniform) per node, None where it was not tested."""
    tests: list = [None] * shape.size
    cur = 0
    for level in range(min(limit, shape.depth)):
        p_cur, q_cur = p[cur].clone(), q[cur].clone()
        nxt = accepted[level] if level < len(accepted) else None
        for rank, kid in enumerate(shape.children[cur]):
            q_tok = float(q_cur[tokens[kid]])
            if q_tok <= 0:
                continue   # never really drawn: not tested
            tests[kid] = (min(1.0, float(p_cur[tokens[kid]]) / q_tok), float(uniforms[level, rank]),
                          float(p_cur[tokens[kid]]), q_tok)
            if kid == nxt:
                break
            r = (p_cur - q_cur).clamp_min(0)
            p_cur = r / r.sum() if float(r.sum()) > 1e-9 else p_cur
            q_cur[tokens[kid]] = 0.0
            q_cur = q_cur / q_cur.sum() if float(q_cur.sum()) > 0 else q_cur
        if nxt is None:
            break
        cur = nxt
    return tests


@pytest.mark.parametrize("prune", [False, True], ids=["as-captured", "pruned-on-cpu"])
def test_the_walk_records_each_test_as_it_happened(prune):
    """Every tested node's recorded accept_prob is min(1, P'/q') under the residual P' and renormalised q' its
    test saw (recomputed here from the full distributions), its uniform is its draw, a node was accepted
    exactly when uniform < accept_prob, and an untested node records neither. Control: a later sibling's
    recorded probability is not min(1, P/q) of the node's original P and q (the narration's old error)."""
    rng = random.Random(5)
    gen = torch.Generator().manual_seed(5)
    vocab, later_siblings_differ = 5, 0
    for case in range(200):
        shape = TreeShape.from_parents(random_tree(rng, rng.randint(2, 12)))
        limit = rng.randint(1, shape.depth)
        tokens = distinct_children_tokens(rng, shape, vocab)
        p = torch.softmax(torch.randn(shape.size, vocab, generator=gen, dtype=torch.float64) * 2, -1)
        q = torch.softmax(torch.randn(shape.size, vocab, generator=gen, dtype=torch.float64) * 2, -1)
        width = max(1, max(len(c) for c in shape.children))
        uniforms = torch.rand(max(shape.depth, 1), width, generator=gen, dtype=torch.float64)
        walk = sampled_walk(WalkTables(shape, "cpu"), torch.tensor(tokens), p, q, uniforms, limit, None, prune=prune)
        accepted = walk.path.tolist()[1:int(walk.accepted) + 1]
        want = recomputed_tests(shape, tokens, p, q, uniforms, accepted, limit)
        status = [STATUS_NAMES[c] for c in walk.status.tolist()]
        for node, expected in enumerate(want):
            got_p, got_u = float(walk.tests[0, node]), float(walk.tests[1, node])
            if expected is None:
                assert walk.tests[:, node].tolist() == [verify.NOT_TESTED] * 4, (case, node)
                assert status[node] not in (ACCEPTED, REJECTED), (case, node)
                continue
            assert got_p == pytest.approx(expected[0], abs=1e-12) and got_u == expected[1], (case, node)
            assert walk.tests[2:, node].tolist() == pytest.approx(expected[2:], abs=1e-12), (case, node)
            assert (got_u < got_p) == (status[node] == ACCEPTED), (case, node)
            parent = shape.parents[node]
            if shape.children[parent].index(node) > 0:
                naive = min(1.0, float(p[parent, tokens[node]] / q[parent, tokens[node]]))
                later_siblings_differ += abs(naive - got_p) > 1e-6
    assert later_siblings_differ >= 20


@GREEDY_WALKS
def test_the_greedy_walk_records_passed_and_failed_tests_without_draws(walk_of):
    shape = TreeShape.from_parents([-1, 0, 0, 1, 1, 2])
    tokens, picks = [0, 3, 4, 1, 2, 0], [3, 2, 0, 0, 0, 0]   # root wants 3 (node 1), node 1 wants 2 (node 4)
    walk = walk_of(shape, tokens, picks, shape.depth)
    assert walk.tests[0].tolist() == [-1.0, 1.0, 0.0, 0.0, 1.0, -1.0]
    assert walk.tests[1:].flatten().tolist() == [-1.0] * 18

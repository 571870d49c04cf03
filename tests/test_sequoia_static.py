"""Sequoia's static-buffer step (graph-ready): the device walks, exactness, and what a graph would capture.

On a CPU graphs="on" runs the static step eagerly through the graph runner's fallback: the same buffers,
fixed shapes and device-side walks a GPU captures and replays.
"""

from __future__ import annotations

import random

import pytest
import torch
from helpers import chi_square_pvalue, target_forward_rows, tiny_pair

from specviz.draws import exponential_like
from specviz.engine.methods import make_decoder
from specviz.engine.models import OFFLINE_DRAFT_DIR, OFFLINE_FEATURE_DRAFT_DIR, ModelPair
from specviz.engine.sampling import SamplingConfig
from specviz.engine.text import encode_prompt
from specviz.sequoia import device_verify, sizing
from specviz.sequoia.decoder import SequoiaDecoder
from specviz.sequoia.device_verify import STATUS_NAMES, WalkTables, greedy_walk_device, sampled_walk_device
from specviz.sequoia.tree import TreeShape
from specviz.sequoia.verify import greedy_walk

PROMPTS = ["Write a Python function that reverses a string.", "Explain why the sky is blue in two sentences."]
MAX_NEW = 24   # room for full trees and for the cut ones near the end
TREE = {"tree_budget": 12, "tree_depth": 4}


def sequoia(pair, prompt, graphs, sampling=None, max_new=MAX_NEW, prompt_ids=None, **tree):
    """A Sequoia decoder with graphs set (built as `make_decoder` builds it, the tree resolved first)."""
    sampling = sampling or SamplingConfig()
    ids = prompt_ids if prompt_ids is not None else encode_prompt(pair.tokenizer, prompt)
    choice = sizing.tree_choice(pair, sampling, **(tree or TREE))
    return SequoiaDecoder(pair, prompt, ids, sampling, max_new, choice, graphs=graphs)


# -- the device walks alone (no model) ---------------------------------------------------------------


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


def test_greedy_device_walk_equals_the_host_walk():
    rng = random.Random(0)
    vocab = 4
    for _ in range(300):
        shape = TreeShape.from_parents(random_tree(rng, rng.randint(1, 14)))
        tokens = [0] * shape.size
        for kids in shape.children:   # siblings are distinct draws
            for kid, tok in zip(kids, rng.sample(range(vocab), len(kids))):
                tokens[kid] = tok
        picks = [rng.randrange(vocab) for _ in range(shape.size)]
        limit = rng.randint(0, shape.depth)
        host_shape = shape.truncated(limit)
        want = greedy_walk(host_shape.children, tokens, picks)
        got = greedy_walk_device(WalkTables(shape, "cpu"), torch.tensor(tokens), torch.tensor(picks), limit)
        k = int(got.accepted)
        assert got.path.tolist()[1:k + 1] == want.accepted and int(got.bonus) == want.bonus_token
        assert got.path.tolist()[k + 1:] == [got.path.tolist()[k]] * (shape.depth - k)   # padded by repeating
        status = [STATUS_NAMES[c] for c in got.status.tolist()]
        assert status[:host_shape.size] == want.statuses(host_shape.size)


MARKOV_P = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.35, 0.05, 0.6]])   # target P(next | last)
MARKOV_Q = torch.tensor([[0.2, 0.2, 0.6], [0.6, 0.2, 0.2], [0.1, 0.8, 0.1]])     # a draft far from it
WALK_TREE = [-1, 0, 0, 1, 1, 2, 3]   # widths 2, depth 3


def markov_decode(n_tokens: int, generator: torch.Generator) -> tuple:
    """Tokens of an order-1 Markov 'target' decoded with speculative steps of the device walk: the tree's
    children drawn without replacement (Gumbel-top-k) from the draft's q, P and q read at each node."""
    shape = TreeShape.from_parents(WALK_TREE)
    tables = WalkTables(shape, "cpu")
    out = [0]
    while len(out) < n_tokens + 1:
        tokens = torch.zeros(shape.size, dtype=torch.long)
        tokens[0] = out[-1]
        for node, kids in enumerate(shape.children):
            if kids:
                q = MARKOV_Q[tokens[node]]
                tokens[kids] = (q / exponential_like(q, generator)).topk(len(kids)).indices
        uniforms = torch.rand(shape.depth, tables.children.shape[1], generator=generator)
        walk = sampled_walk_device(tables, tokens, MARKOV_P[tokens], MARKOV_Q[tokens], uniforms, shape.depth,
                                   generator)
        k = int(walk.accepted)
        out += [int(t) for t in tokens[walk.path[1:k + 1]]] + [int(walk.bonus)]
    return tuple(out[1:n_tokens + 1])


def markov_exact(n_tokens: int) -> dict:
    dist = {(): 1.0}
    for _ in range(n_tokens):
        dist = {seq + (x,): p * float(MARKOV_P[seq[-1] if seq else 0, x]) for seq, p in dist.items() for x in range(3)}
    return dist


@pytest.mark.parametrize("control", [False, True])
def test_sampled_device_walk_keeps_the_target_distribution(monkeypatch, control):
    """Three tokens of the Markov target through the device walk follow P exactly; with a planted bug
    (no residual after a rejection: the classic mistake) the same check at the same N rejects."""
    if control:
        monkeypatch.setattr(device_verify, "residual_device", lambda p, q: p)
    generator = torch.Generator().manual_seed(1)
    samples = [markov_decode(3, generator) for _ in range(2500)]
    p_value = chi_square_pvalue(samples, markov_exact(3), control=control)
    assert (p_value < 1e-3) if control else (p_value > 1e-3), p_value


# -- the decoder on the real offline model (fp32) ------------------------------------------------------


@pytest.fixture(scope="module")
def pairs(pair_fp32):
    """The offline default's target with each draft it ships (the independent, pruned one and the feature
    draft), and drafting for itself; one target shared by all."""
    from specviz.draft.feature import load_feature_draft
    from specviz.engine.drafts import format_of

    target = pair_fp32.target
    found = {"self": pair_fp32}
    for name, where in (("pruned", OFFLINE_DRAFT_DIR), ("feature", OFFLINE_FEATURE_DRAFT_DIR)):
        draft = format_of(str(where)).load(target, str(where)) if name == "pruned" else load_feature_draft(target, where)
        found[name] = ModelPair(target, draft, pair_fp32.tokenizer, pair_fp32.target_name, name, pair_fp32.device,
                                pair_fp32.dtype)
    return found


@pytest.fixture(scope="module")
def ar_tokens(pair_fp32):
    return {p: make_decoder("ar", pair_fp32, p, max_new_tokens=MAX_NEW).run().token_ids for p in PROMPTS}


@pytest.mark.parametrize("draft", ["pruned", "self", "feature"])
def test_greedy_static_step_equals_eager_and_autoregressive(pairs, ar_tokens, draft):
    pair = pairs[draft]
    cut = 0
    for prompt in PROMPTS if draft == "pruned" else PROMPTS[:1]:   # (the CPU's budget)
        with target_forward_rows() as rows:
            static = sequoia(pair, prompt, "on").run()
        assert static.token_ids == ar_tokens[prompt], (draft, prompt)
        graphs = static.graphs
        assert graphs["enabled"] and not graphs["capturing"] and graphs["eager_calls"] > 0
        assert static.settings["graphs"] == "on"
        steps = static.steps[1:]
        assert any(s.payload.accepted_path for s in steps)
        assert any(n.status == "rejected" for s in steps for n in s.payload.nodes) or draft == "self"
        # The trace's forward sizes are what the target's forward ran: the whole fixed tree, also where the
        # tree is cut near the end (its candidates are the cut tree's, as on the eager path).
        assert [step.tokens_processed for step in steps] == rows
        assert all(len(step.payload.nodes) <= step.tokens_processed for step in steps)
        cut += sum(len(step.payload.nodes) < step.tokens_processed for step in steps)
    assert cut, "no step cut its tree: the runs did not test a cut tree's forward size"
    if draft == "pruned":   # today's path, for the record (test_sequoia.py covers it); auto is it on a CPU
        eager = sequoia(pair, PROMPTS[0], "off").run()
        assert eager.token_ids == ar_tokens[PROMPTS[0]] and not eager.graphs["enabled"]
        auto = sequoia(pair, PROMPTS[0], "auto")
        assert auto.static is None and auto.trace.settings["graphs"] == "auto"
        auto.close()


@pytest.mark.parametrize("draft", ["pruned", "feature"])
def test_what_a_graph_captures_has_no_graph_breaks(pairs, draft):
    """The target's tree forward and every draft forward (the root's read and each level's) trace as one
    graph each: a break would make capture fail on a GPU."""
    decoder = sequoia(pairs[draft], PROMPTS[0], "on", max_new=8, tree_parents=[-1, 0, 0, 1, 3])
    decoder.step()
    decoder.step()   # a tree step: every shape built and its buffers filled
    static = decoder.static
    drafter = static.drafter
    root = drafter._root_shape if draft == "pruned" else drafter._root_shape(drafter.window)   # C - 1 > window
    computes = [static.tree_forward.compute] + [s.compute for s in [root] + drafter._level_shapes[1:]]
    assert len(computes) == 4
    for compute in computes:
        with torch.inference_mode():
            explained = torch._dynamo.explain(compute)()
        assert explained.graph_break_count == 0, explained.break_reasons
        assert explained.graph_count == 1
    decoder.run()


def test_sampled_static_step_is_reproducible_by_seed(pairs):
    sampling = SamplingConfig(0.8, 0.95, seed=5)
    runs = [sequoia(pairs["pruned"], PROMPTS[0], "on", sampling=sampling, max_new=8).run() for _ in range(2)]
    assert runs[0].token_ids == runs[1].token_ids and len(runs[0].token_ids) == 8
    trees = [{k: v for k, v in run.to_dict()["steps"][1]["payload"].items() if not k.endswith("_ms")} for run in runs]
    assert trees[0] == trees[1]


SAMPLING_TREE = [-1, 0, 0, 0, 1, 1, 2, 4, 4, 7]   # test_sampling_exact's: widths up to 3, depth 4
STATIC_SAMPLES = 2000


def static_samples(pair, sampling: SamplingConfig, n: int) -> tuple[list[tuple], list[int]]:
    """The first four tokens of n seeded static-step runs, and how deep each first tree step accepted."""
    samples, depths = [], []
    for seed in range(n):
        cfg = SamplingConfig(sampling.temperature, sampling.top_p, sampling.top_k, seed=seed)
        trace = sequoia(pair, "", "on", sampling=cfg, max_new=6, prompt_ids=[1, 2, 3],
                        tree_parents=SAMPLING_TREE).run()
        samples.append(tuple(trace.token_ids[:4]))
        depths.append(len(trace.steps[1].payload.accepted_path))
    return samples, depths


@pytest.mark.parametrize("control", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_sampled_static_step_keeps_the_target_distribution(one_thread, monkeypatch, control):
    """The tiny enumerable target (test_sampling_exact's machinery) through the static step: its first
    four tokens follow the exact distribution; with the device walk's residual planted wrong, the same
    check at the same N rejects."""
    from helpers import exact_distribution

    sampling = SamplingConfig(1.0)
    pair = tiny_pair(draft_seed=1, logit_scale=14.0)
    if control:
        monkeypatch.setattr(device_verify, "residual_device", lambda p, q: p)
    samples, depths = static_samples(pair, sampling, STATIC_SAMPLES)
    p_value = chi_square_pvalue(samples, exact_distribution(pair.target, [1, 2, 3], sampling, 4), control=control)
    assert (p_value < 1e-3) if control else (p_value > 1e-3), p_value
    assert min(depths) == 0 and max(depths) >= 3   # rejections at the root and paths three deep

"""Sequoia's one step (graph-ready) on the real model: exactness with every draft, honest forward sizes,
what a graph would capture, and the device walk's distribution.

On a CPU every graphs setting runs the same step uncaptured: the same buffers, shapes and device-side
walks a GPU captures and replays, each shape over the filled slots only.
"""

from __future__ import annotations

import random

import pytest
import torch
from helpers import cache_forward_curves, chi_square_pvalue, target_forward_rows, tiny_pair

from specviz.draws import exponential_like
from specviz.engine.methods import make_decoder
from specviz.engine.models import OFFLINE_DRAFT_DIR, OFFLINE_FEATURE_DRAFT_DIR, ModelPair
from specviz.engine.sampling import SamplingConfig
from specviz.engine.text import encode_prompt
from specviz.sequoia import sizing, verify
from specviz.sequoia.decoder import COPY_TOKENS, SequoiaDecoder
from specviz.sequoia.tree import TreeShape
from specviz.sequoia.verify import WalkTables, sampled_walk

PROMPTS = ["Write a Python function that reverses a string.", "Explain why the sky is blue in two sentences."]
MAX_NEW = 24   # room for full trees and for the cut ones near the end
TREE = {"tree_budget": 12, "tree_depth": 4}


def sequoia(pair, prompt, graphs, sampling=None, max_new=MAX_NEW, prompt_ids=None, copies=COPY_TOKENS, **tree):
    """A Sequoia decoder with graphs set (built as `make_decoder` builds it, the tree resolved first)."""
    sampling = sampling or SamplingConfig()
    ids = prompt_ids if prompt_ids is not None else encode_prompt(pair.tokenizer, prompt)
    choice = sizing.tree_choice(pair, sampling, **(tree or TREE))
    return SequoiaDecoder(pair, prompt, ids, sampling, max_new, choice, graphs=graphs, copies=copies)


# -- the device walks alone (no model) ---------------------------------------------------------------


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
        walk = sampled_walk(tables, tokens, MARKOV_P[tokens], MARKOV_Q[tokens], uniforms, shape.depth,
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
        monkeypatch.setattr(verify, "residual", lambda p, q: p)
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
def test_greedy_step_equals_autoregressive_whatever_the_graphs_setting(pairs, ar_tokens, draft):
    pair = pairs[draft]
    cut = 0
    for prompt in PROMPTS if draft == "pruned" else PROMPTS[:1]:   # (the CPU's budget)
        with target_forward_rows() as rows:
            trace = sequoia(pair, prompt, "on").run()
        assert trace.token_ids == ar_tokens[prompt], (draft, prompt)
        graphs = trace.graphs
        assert graphs["enabled"] and not graphs["capturing"] and graphs["eager_calls"] > 0
        assert trace.settings["graphs"] == "on"
        steps = trace.steps[1:]
        assert any(s.payload.accepted_path for s in steps)
        assert any(n.status == "rejected" for s in steps for n in s.payload.nodes) or draft == "self"
        # The trace's forward sizes are what the target's forward ran: uncaptured, a tree cut near the end
        # runs cut (its nodes are the tree the app draws).
        assert [step.tokens_processed for step in steps] == rows
        assert all(len(step.payload.nodes) == step.tokens_processed for step in steps)
        cut += sum(step.payload.depth < TREE["tree_depth"] for step in steps)
    assert cut, "no step cut its tree: the runs did not test a cut tree's forward"
    if draft == "pruned":   # every setting runs the one step on a CPU, and gives the same tokens
        for graphs in ("off", "auto"):
            other = sequoia(pair, PROMPTS[0], graphs).run()
            assert other.token_ids == ar_tokens[PROMPTS[0]] and other.graphs["enabled"]
            assert not other.graphs["capturing"] and other.settings["graphs"] == graphs


def shapes_made(monkeypatch) -> dict:
    """Every static shape a decoder asks for from now on (made, or found kept), by identity. Sessions and
    their shapes are kept on the shared model between tests, so what a forward holds is all that the tests
    before ran on it (hundreds of adaptive trees); this is what the decoders here use."""
    from specviz.draft.feature_static import FeatureStaticForward
    from specviz.engine.static import StaticForward

    made = {}

    def recording(ask):
        def recorded(forward, *args, **kwargs):
            shape = ask(forward, *args, **kwargs)
            made[id(shape)] = shape
            return shape
        return recorded

    for forward in (StaticForward, FeatureStaticForward):   # the target's and model drafts', the feature draft's
        monkeypatch.setattr(forward, "shape", recording(forward.shape))

    # A tree prepared by an earlier test on the same session is found there, its target shape not asked for again.
    prepare = SequoiaDecoder._prepared

    def prepared(decoder, *args, **kwargs):
        tree = prepare(decoder, *args, **kwargs)
        made[id(tree.target)] = tree.target
        return tree

    monkeypatch.setattr(SequoiaDecoder, "_prepared", prepared)
    return made


@pytest.mark.parametrize("draft", ["pruned", "feature"])
def test_what_a_graph_captures_has_no_graph_breaks(pairs, draft, tmp_path, monkeypatch):
    """Every shape the step runs traces as one graph: the target's trees (whole, cut near the token limit,
    adaptive) and every draft forward (the root's read and each level's). A break would make capture fail
    on a GPU."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    cache_forward_curves(pairs[draft])   # a cheap draft level: the adaptive tree grows levels
    made = shapes_made(monkeypatch)
    fixed = sequoia(pairs[draft], PROMPTS[0], "on", max_new=12, tree_parents=[-1, 0, 0, 1, 3])
    adaptive = {"tree": "adaptive", "tree_budget": 8, "tree_depth": 3, "tree_threshold": 0.001}
    grown = sequoia(pairs[draft], PROMPTS[0], "on", max_new=12, **adaptive)
    monkeypatch.setattr(SequoiaDecoder, "pad_adaptive", True)   # what a GPU runs: fixed shapes, refilled
    padded = sequoia(pairs[draft], PROMPTS[0], "on", max_new=12, **adaptive)
    fixed.step()   # the prefill
    for depth in range(1, fixed.shape.depth):   # each cut a run near its token limit may reach
        fixed._fixed_tree(depth)
    for decoder in (fixed, grown, padded):
        decoder.run()
    shapes = list(made.values())
    kinds = {shape.key[1][0] for shape in shapes}
    assert {"tree", "tree-padded", "root", "level"} <= kinds, kinds
    assert any(not shape.capturable for shape in shapes)   # the uncaptured adaptive tree's (kept, never captured)
    padded_levels = {shape.key for shape in shapes if shape.key[1][:2] == ("level", "adaptive") and shape.capturable}
    assert padded_levels and len(padded_levels) <= 2, padded_levels   # depth 3: levels for depths 1 and 2 at most
    fixed_trees = {shape.key for shape in shapes if shape.key[1][0] == "tree" and shape.capturable}
    assert len(fixed_trees) >= fixed.shape.depth, fixed_trees   # the whole fixed tree and its cuts
    for shape in shapes:
        with torch.inference_mode():
            explained = torch._dynamo.explain(shape.compute)()
        assert explained.graph_break_count == 0, (shape.key, explained.break_reasons)
        assert explained.graph_count == 1, shape.key


@pytest.mark.parametrize("draft", ["pruned", "feature"])
def test_a_padded_adaptive_tree_grows_the_same_trees_at_fixed_shapes(pairs, ar_tokens, draft, tmp_path, monkeypatch):
    """Captured (on a GPU), an adaptive tree runs at fixed shapes whose blocks are refilled each step. With
    the levels' costs flat (no measured curve, so padding rows cost nothing more), the padded step grows the
    very trees the uncaptured one does, from the same seed, greedy and sampled; its forwards run every
    padded row, and the trace says so."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))   # no cached curves: the costs the weights give
    pair, prompt = pairs[draft], PROMPTS[0]
    # No copies in either: a padded (captured) step grafts none, so the trees compared are the draft's alone.
    adaptive = {"tree": "adaptive", "tree_budget": 10, "tree_depth": 4, "tree_threshold": 0.02, "copies": 0}
    made = shapes_made(monkeypatch)
    for sampling in (SamplingConfig(), SamplingConfig(0.8, seed=3)):
        runs = {}
        for pad in (False, True):
            monkeypatch.setattr(SequoiaDecoder, "pad_adaptive", pad)
            made.clear()
            runs[pad] = sequoia(pair, prompt, "off", sampling=sampling, max_new=16, **adaptive).run()
        compact, padded = runs[False], runs[True]
        assert padded.token_ids == compact.token_ids
        if sampling.greedy:
            assert padded.token_ids == ar_tokens[prompt][:16]
        trees = [[[(n.parent, n.token_id, n.status) for n in step.payload.nodes] for step in run.steps[1:]]
                 for run in (compact, padded)]
        assert trees[0] == trees[1]
        assert any(len(tree) > 4 and max(parent for parent, _, _ in tree) > 0 for tree in trees[1])   # two levels deep
        assert padded.settings["tree_padded"] and "tree_padded" not in compact.settings
        # Every tree step's forward ran the padded rows; the uncaptured one ran each tree's own.
        assert {step.tokens_processed for step in padded.steps[1:]} == {10}
        assert [s.tokens_processed for s in compact.steps[1:]] == [len(s.payload.nodes) for s in compact.steps[1:]]
        # One target shape and one per level, whatever the trees: nothing kept per tree.
        assert all(shape.capturable for shape in made.values())
        levels = {shape.key for shape in made.values() if shape.key[1][:2] == ("level", "adaptive")}
        assert len(levels) <= 3 and sum(shape.key[1][0] == "tree-padded" for shape in made.values()) == 1
    # The session's next race with other limits pads to its own rows (kept shapes and trees are per limits).
    smaller = sequoia(pair, prompt, "off", max_new=16, **{**adaptive, "tree_budget": 6, "tree_depth": 3}).run()
    assert smaller.token_ids == ar_tokens[prompt][:16]
    assert {step.tokens_processed for step in smaller.steps[1:]} == {6}


def test_a_sessions_next_race_reuses_its_prepared_trees(pairs, monkeypatch):
    """A tree's index tensors, walk tables and shapes are made once per session, not once per race (a
    sampling test's thousands of short runs, a room's races), and a reused tree decodes the same."""
    from specviz.sequoia import decoder as sequoia_decoder

    made = []
    real = sequoia_decoder._Tree.__init__

    def counted(tree, *args, **kwargs):
        made.append(tree)
        real(tree, *args, **kwargs)

    monkeypatch.setattr(sequoia_decoder._Tree, "__init__", counted)
    tree = {"tree_parents": [-1, 0, 0, 1, 2, 3, 5]}
    runs = []
    for _ in range(2):
        decoder = sequoia(pairs["pruned"], PROMPTS[1], "off", max_new=10, **tree)
        runs.append((decoder.run(), len(made)))
        decoder.close()
    (first, made_first), (second, made_both) = runs
    assert second.token_ids == first.token_ids
    assert made_both == made_first, "the second race prepared its trees again"


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
        monkeypatch.setattr(verify, "residual", lambda p, q: p)
    samples, depths = static_samples(pair, sampling, STATIC_SAMPLES)
    p_value = chi_square_pvalue(samples, exact_distribution(pair.target, [1, 2, 3], sampling, 4), control=control)
    assert (p_value < 1e-3) if control else (p_value > 1e-3), p_value
    assert min(depths) == 0 and max(depths) >= 3   # rejections at the root and paths three deep

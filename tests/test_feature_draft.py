"""The feature-conditioned (EAGLE-style) draft: exactness in Sequoia, train/decode agreement, per-depth DP.

Exactness runs on the real offline target in fp32 with the shipped feature draft
(and with a freshly built, untrained one, which is rejected often); the sampling
test uses tiny random models, as the other statistical tests do.
"""

import itertools
import os

import numpy as np
import pytest
import torch
from helpers import tiny_feature_pair

from specviz.draft.drafter import with_prompt_tokens
from specviz.draft.feature import (FeatureDraft, FeatureDraftForward, is_feature_draft_dir, load_feature_draft,
                                   save_feature_draft)
from specviz.draft.featuretrain import evaluate_depths, heldout_features, target_features, unroll_mask, unrolled
from specviz.engine.kernels import Int8Rows, fbgemm_available, int8_kernel
from specviz.engine.lean import LeanLlama, ModelForward
from specviz.engine.methods import make_decoder
from specviz.engine.models import OFFLINE_FEATURE_DRAFT_DIR, ModelPair, load_pair
from specviz.engine.sampling import SamplingConfig
from specviz.sequoia.measure import _comb, _count_step, lower_row, profile_acceptance_by_depth
from specviz.sequoia.tree import TreeShape
from specviz.trace import ORIGIN_COPY
from specviz.sequoia.tree_dp import build_tables, tree_value

PROMPTS = ["Write a haiku about trees", "Write a Python function that reverses a string.",
           "Explain why the sky is blue in two sentences."]
MAX_NEW = 48
TREES = {"chain": {"tree_parents": [-1, 0, 1, 2, 3]}, "star": {"tree_parents": [-1, 0, 0, 0, 0]},
         "dp16": {"tree_budget": 16, "tree_depth": 5}, "dp32": {"tree_budget": 32, "tree_depth": 6},
         "adaptive": {"tree": "adaptive"},
         "adaptive-wide": {"tree": "adaptive", "tree_threshold": 0.005, "tree_budget": 40, "tree_depth": 6}}


@pytest.fixture(scope="module")
def feature_pair():
    """The offline default in fp32 with its shipped feature draft."""
    where = os.environ.get("SPECVIZ_TEST_FEATURE_DRAFT") or OFFLINE_FEATURE_DRAFT_DIR   # a checkpoint in training
    if not is_feature_draft_dir(where):
        pytest.fail(f"no feature draft in {where} (shipped in assets/draft-feature-smollm2-135m)")
    torch.manual_seed(0)
    pair = load_pair("default", str(where), device="cpu", dtype="fp32")
    assert getattr(pair.draft, "is_feature_draft", False)
    return pair


@pytest.fixture(scope="module")
def untrained_pair(feature_pair):
    """The same target with an untrained feature draft (its last layer, fc = [I | I]): mostly rejected."""
    draft = FeatureDraft(feature_pair.target, feature_pair.draft.vocab_ids, torch.float32)
    draft.init_from_target(feature_pair.target)
    draft.eval().requires_grad_(False)
    return ModelPair(feature_pair.target, draft, feature_pair.tokenizer, feature_pair.target_name, "untrained",
                     feature_pair.device, feature_pair.dtype)


TAPS = (4, 14, 24)


@pytest.fixture(scope="module")
def tapped_pair(feature_pair):
    """The shipped draft's weights with three tapped target layers whose fusion is random, not zero: proposals
    read the taps at every root, and change."""
    draft = FeatureDraft(feature_pair.target, feature_pair.draft.vocab_ids, torch.float32, TAPS)
    draft.load_state_dict({k: v for k, v in feature_pair.draft.own_state().items() if "tap" not in k}, strict=False)
    torch.manual_seed(5)
    with torch.no_grad():
        draft.fc_taps.weight.normal_(0, 0.02)
    draft.eval().requires_grad_(False)
    return ModelPair(feature_pair.target, draft, feature_pair.tokenizer, feature_pair.target_name, "tapped",
                     feature_pair.device, feature_pair.dtype)


@pytest.fixture(scope="module")
def two_layer_pair(feature_pair):
    """The shipped draft's weights with a second decoder layer whose outputs are random, not zero: every
    level runs both layers, and proposals change."""
    shipped = feature_pair.draft
    draft = FeatureDraft(feature_pair.target, shipped.vocab_ids, torch.float32, shipped.taps, layers=2)
    draft.init_from_target(feature_pair.target)
    draft.load_state_dict(shipped.own_state(), strict=False)
    torch.manual_seed(6)
    with torch.no_grad():
        draft.more_layers[0].o_proj.weight.normal_(0, 0.01)
        draft.more_layers[0].down_proj.weight.normal_(0, 0.01)
    draft.eval().requires_grad_(False)
    return ModelPair(feature_pair.target, draft, feature_pair.tokenizer, feature_pair.target_name, "two layers",
                     feature_pair.device, feature_pair.dtype)


@pytest.fixture(scope="module")
def ar_tokens(feature_pair):
    return {p: make_decoder("ar", feature_pair, p, max_new_tokens=MAX_NEW).run().token_ids for p in PROMPTS}


@pytest.mark.parametrize("tree", list(TREES))
def test_greedy_with_the_feature_draft_equals_autoregressive(feature_pair, ar_tokens, tree):
    accepted = rejected = 0
    for prompt in PROMPTS:
        trace = make_decoder("sequoia", feature_pair, prompt, max_new_tokens=MAX_NEW, **TREES[tree]).run()
        assert trace.token_ids == ar_tokens[prompt], (tree, prompt)
        assert trace.settings["draft_kind"] == "feature"
        for step in trace.steps[1:]:
            accepted += len(step.payload.accepted_path)
            rejected += sum(n.status == "rejected" for n in step.payload.nodes)
            drafted = [n for n in step.payload.nodes if n.origin != ORIGIN_COPY]   # a copy read nothing
            assert all(n.draft_input.startswith("target") for n in drafted if n.depth == 1)
            assert all(n.draft_input.startswith("draft") for n in drafted if n.depth >= 2)
    assert accepted > 0
    if tree != "chain":
        assert rejected > 0


def _head_without(feature_pair, prompt: str, answer: list[int]):
    """The shipped draft with a head that lacks every token of `answer` but the prompt's, and those tokens."""
    shipped = feature_pair.draft
    prompt_ids = set(make_decoder("ar", feature_pair, prompt, max_new_tokens=1).prompt_ids)
    removed = set(answer) - prompt_ids
    keep = torch.tensor([t for t in shipped.vocab_ids.tolist() if t not in removed])
    draft = FeatureDraft(feature_pair.target, keep, torch.float32, shipped.taps)
    draft.load_state_dict(shipped.own_state(), strict=False)
    return draft.eval().requires_grad_(False), removed


def test_heldout_agreement_counts_the_head_as_sequoia_widens_it(feature_pair, ar_tokens):
    """draft-eval's `widen`: a written token joins the head from its first writing on, as in Sequoia."""
    prompt = PROMPTS[1]
    draft, removed = _head_without(feature_pair, prompt, ar_tokens[prompt])
    prompt_ids = make_decoder("ar", feature_pair, prompt, max_new_tokens=1).prompt_ids
    rows = heldout_features(feature_pair.target, None, [{"prompt_ids": prompt_ids,
                                                         "answer_ids": ar_tokens[prompt]}], draft.taps)
    cut, widened = evaluate_depths(draft, rows, 2), evaluate_depths(draft, rows, 2, widen=True)
    shipped = evaluate_depths(feature_pair.draft, rows, 2, widen=True)
    # Without rows for the answer's own tokens, only tokens of the prompt can agree.
    top1 = rows[0]["top1"][len(prompt_ids):].tolist()
    assert cut["depth1"] <= sum(t not in removed for t in top1) / len(top1)
    assert widened["depth1"] > cut["depth1"] and widened["depth2"] > cut["depth2"]
    # ...and every token's first writing stays unguessable: the shipped head (rows for most) does better.
    assert shipped["depth1"] > widened["depth1"]


@pytest.mark.parametrize("tree,graphs", [("dp16", "off"), ("adaptive", "off"), ("dp16", "on")])
def test_the_heads_rows_grow_with_the_tokens_the_target_writes(feature_pair, ar_tokens, tree, graphs):
    """A token the draft's head has no row for can never be drafted; once the target writes it, it can
    (answers repeat their own words). The head here lacks every token of the answer but the prompt's.
    The static step (graphs on, uncaptured on a CPU) reads the same widening head."""
    prompt = PROMPTS[1]
    draft, removed = _head_without(feature_pair, prompt, ar_tokens[prompt])
    pair = ModelPair(feature_pair.target, draft, feature_pair.tokenizer, feature_pair.target_name, "cut head",
                     feature_pair.device, feature_pair.dtype)
    decoder = make_decoder("sequoia", pair, prompt, max_new_tokens=MAX_NEW, graphs=graphs, **TREES[tree])
    static_forward = decoder.drafter.forward
    heads = []
    trace = decoder.run(on_step=lambda record: heads.append(decoder.drafter and decoder.drafter.vocab_ids))
    assert trace.token_ids == ar_tokens[prompt]
    rows = heads[-2].tolist()   # the last step closes the decoder
    assert len(rows) == len(set(rows)), "a token got two rows"
    assert set(trace.token_ids[:-1]) <= set(rows)
    # Written once, drafted and accepted later: at least one removed token came from the draft.
    drafted = [n.token_id for step in trace.steps[1:] for n in step.payload.nodes
               if n.status == "accepted" and n.depth > 0]
    assert removed & set(drafted)
    if graphs == "on":
        assert trace.graphs["enabled"] and not trace.graphs["capturing"]
        _a_new_race_starts_from_its_own_prompts_rows(pair, static_forward, heads[-2], removed)
        return
    # A new row scores its token as the target's own head row does (in int8: one scale per row).
    feats = torch.randn(3, feature_pair.target.config.hidden_size)
    new = torch.tensor(sorted(removed)[:5])
    for int8 in (False, True):
        fwd = FeatureDraftForward(draft, 8, int8=int8)
        before = fwd.logits(feats)
        fwd.widen(new)
        after = fwd.logits(feats)
        torch.testing.assert_close(after[:, :before.shape[1]], before)   # a matmul of more rows may round apart
        assert torch.equal(fwd.vocab_ids[before.shape[1]:], new)
        whole = FeatureDraftForward(draft, 8, int8=int8)
        whole.reset_head(torch.arange(feature_pair.vocab_size))
        column = {t: c for c, t in enumerate(whole.vocab_ids.tolist())}   # the draft's own rows come first
        assert sorted(column) == list(range(feature_pair.vocab_size))
        torch.testing.assert_close(after[:, before.shape[1]:], whole.logits(feats)[:, [column[t] for t in new.tolist()]])


def _a_new_race_starts_from_its_own_prompts_rows(pair, static_forward, widened: torch.Tensor, removed: set) -> None:
    """The static forward is kept in its session across races: the next race's head is its own prompt's,
    none of the rows the last race's answer added."""
    prompt = PROMPTS[0]
    decoder = make_decoder("sequoia", pair, prompt, max_new_tokens=4, graphs="on", **TREES["dp16"])
    try:
        assert decoder.drafter.forward is static_forward   # the same session, so the same forward and head
        assert set(widened.tolist()) & removed   # the last race widened its head
        expected = FeatureDraftForward(pair.draft, 8)
        expected.reset_head(with_prompt_tokens(pair.draft.vocab_ids, decoder.prompt_ids, "cpu"))
        assert torch.equal(decoder.drafter.vocab_ids, expected.vocab_ids)
        assert decoder.trace.settings["draft_int8"] is False   # fp32 drafts stay dense (int8: next test)
    finally:
        decoder.close()


SAMPLING_TREE = [-1, 0, 0, 0, 1, 1, 2, 4, 4, 7]   # test_sampling_exact's: widths up to 3, depth 4
STATIC_SAMPLES = 2000   # test_sequoia_static's N for the same tiny target (its control rejects at it)


@pytest.mark.parametrize("control", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_sampled_static_step_with_a_head_subset_keeps_the_target_distribution(one_thread, monkeypatch, control):
    """The static step, uncaptured, with a feature draft whose head is a subset in its own order (column !=
    token), joined by the prompt's tokens and widened by the target's: q over the whole vocabulary is zero
    outside the rows and each drawn column maps to its token, so the first four tokens follow the exact
    distribution; with the walk's residual planted wrong, the same check at the same N rejects."""
    from helpers import chi_square_pvalue, exact_distribution, sample_sequences

    from specviz.sequoia import verify

    tiny = tiny_feature_pair(logit_scale=14.0, noise=1.0)
    draft = FeatureDraft(tiny.target, torch.tensor([5, 2, 0]), torch.float32)   # 1, 3: the prompt's; 4: written
    draft.load_state_dict(tiny.draft.own_state(), strict=False)
    pair = ModelPair(tiny.target, draft.eval(), tiny.tokenizer, tiny.target_name, "subset head", tiny.device,
                     tiny.dtype)
    if control:
        monkeypatch.setattr(verify, "residual", lambda p, q: p)
    sampling, prompt, depths, widened_drafts = SamplingConfig(1.0), [1, 2, 3], [], []

    def record(trace):
        assert trace.graphs["enabled"] and not trace.graphs["capturing"]
        depths.append(len(trace.steps[1].payload.accepted_path))
        widened_drafts.extend(n.token_id for step in trace.steps[1:] for n in step.payload.nodes
                              if n.depth > 0 and n.token_id == 4)

    samples = sample_sequences("sequoia", pair, prompt, sampling, STATIC_SAMPLES, on_trace=record, graphs="on",
                               tree_parents=SAMPLING_TREE)
    p_value = chi_square_pvalue(samples, exact_distribution(pair.target, prompt, sampling, 4), control=control)
    assert (p_value < 1e-3) if control else (p_value > 1e-3), p_value
    assert min(depths) == 0 and max(depths) >= 2, depths   # rejections at the root and paths two deep
    assert widened_drafts   # the token the head lacked was drafted once the target had written it


def test_adaptive_trees_follow_the_drafts_confidence(feature_pair):
    """Each step's tree is grown from the draft's ranked probabilities: shapes vary, stay within the limits,
    and every non-root node's path score reached the threshold."""
    tau = 0.05
    trace = make_decoder("sequoia", feature_pair, PROMPTS[1], max_new_tokens=MAX_NEW, tree="adaptive",
                         tree_threshold=tau, tree_budget=20, tree_depth=5).run()
    assert trace.settings["tree"] == "adaptive" and trace.settings["threshold"] == tau
    shapes = set()
    for step in trace.steps[1:]:
        nodes = step.payload.nodes
        assert len(nodes) <= 20 and step.payload.depth <= 5
        shapes.add(tuple(n.parent for n in nodes))
        # The product of draft probabilities along a greedy path bounds the ranked-probability score.
        for n in nodes[1:]:
            path_q, a = 1.0, n
            while a.parent >= 0:
                path_q *= a.draft_prob
                a = nodes[a.parent]
            assert path_q >= tau * 0.999, (n.id, path_q)
    assert len(shapes) >= 3
    assert max(len(s) for s in shapes) > min(len(s) for s in shapes)


def test_greedy_with_int8_draft_levels_equals_autoregressive(feature_pair, ar_tokens, monkeypatch):
    """The int8 levels a bf16 draft runs on a CPU, forced here in fp32: proposals change, output does not."""
    import specviz.draft.feature as feature

    monkeypatch.setattr(feature, "int8_decoding_supported", lambda device, dtype: True)
    # 24 tokens: the int8 kernel is slow with fp32 inputs. Graphs on: the static step, uncaptured, runs them too.
    for tree, graphs in (("dp16", "off"), ("adaptive", "off"), ("dp16", "on")):
        trace = make_decoder("sequoia", feature_pair, PROMPTS[0], max_new_tokens=24, graphs=graphs,
                             **TREES[tree]).run()
        assert trace.settings["draft_int8"] is True
        assert trace.token_ids == ar_tokens[PROMPTS[0]][:24], tree


def test_adaptive_tree_mistakes_are_clear_errors(feature_pair):
    from specviz.errors import InvalidInput

    for kwargs, message in (({"tree_parents": [-1, 0]}, "cannot be combined"), ({"tree_threshold": 1.5}, r"\(0, 1\]"),
                            ({"tree_budget": 1}, "between 2 and")):
        with pytest.raises(InvalidInput, match=message):
            make_decoder("sequoia", feature_pair, PROMPTS[0], max_new_tokens=8, tree="adaptive", **kwargs)


@pytest.mark.parametrize("tree", ["chain", "dp16", "adaptive"])
def test_greedy_with_an_untrained_feature_draft_equals_autoregressive(untrained_pair, ar_tokens, tree):
    for prompt in PROMPTS[:2]:
        trace = make_decoder("sequoia", untrained_pair, prompt, max_new_tokens=MAX_NEW, **TREES[tree]).run()
        assert trace.token_ids == ar_tokens[prompt], (tree, prompt)


@pytest.mark.parametrize("tree", ["dp16", "adaptive"])
def test_greedy_with_a_tapped_feature_draft_equals_autoregressive(tapped_pair, ar_tokens, tree):
    """A draft that also reads the target's earlier layers (EAGLE-3's taps) at true positions: each target
    forward returns them, the root's pairs carry them, and output stays the target's."""
    accepted = 0
    for prompt in PROMPTS[:2]:
        trace = make_decoder("sequoia", tapped_pair, prompt, max_new_tokens=MAX_NEW, **TREES[tree]).run()
        assert trace.token_ids == ar_tokens[prompt], (tree, prompt)
        accepted += sum(len(step.payload.accepted_path) for step in trace.steps[1:])
        root_children = [n for step in trace.steps[1:] for n in step.payload.nodes
                         if n.depth == 1 and n.origin != ORIGIN_COPY]
        assert all("layers 4, 14, 24" in n.draft_input for n in root_children)
    assert accepted > 0


@pytest.mark.parametrize("tree", ["dp16", "adaptive"])
def test_greedy_with_a_two_layer_feature_draft_equals_autoregressive(two_layer_pair, ar_tokens, tree):
    accepted = 0
    for prompt in PROMPTS[:2]:
        trace = make_decoder("sequoia", two_layer_pair, prompt, max_new_tokens=MAX_NEW, **TREES[tree]).run()
        assert trace.token_ids == ar_tokens[prompt], (tree, prompt)
        accepted += sum(len(step.payload.accepted_path) for step in trace.steps[1:])
    assert accepted > 0
    assert two_layer_pair.draft.decoding_kind.endswith("-2layers")   # the profiler times it apart from one layer


@torch.inference_mode()
def test_an_added_layer_starts_as_the_identity_and_is_saved(feature_pair, tmp_path):
    """A warm start that adds layers begins at the draft it was (their outputs are zero); a saved draft
    records its layer count, a loader refuses weights of layers its feature.json does not name, and a
    trained layer changes what the draft predicts."""
    import json

    from specviz.errors import ModelLoadError

    shipped, target = feature_pair.draft, feature_pair.target
    grown = FeatureDraft(target, shipped.vocab_ids, torch.float32, shipped.taps, layers=3)
    grown.init_from_target(target)
    grown.load_state_dict(shipped.own_state(), strict=False)
    ids = torch.tensor([feature_pair.tokenizer.encode("A second layer adds nothing until it is trained.")])
    rows = target_features(target, ids, shipped.taps)
    torch.testing.assert_close(grown(ids, rows), shipped(ids, rows))
    with torch.no_grad():
        grown.more_layers[1].down_proj.weight.normal_(0, 0.01)
    assert not torch.allclose(grown(ids, rows), shipped(ids, rows))

    save_feature_draft(grown, tmp_path, "default")
    (tmp_path / "vocab.json").write_text(json.dumps({"vocab_ids": shipped.vocab_ids.tolist()}))
    meta = json.loads((tmp_path / "feature.json").read_text())
    assert meta["layers"] == 3
    again = load_feature_draft(target, tmp_path, torch.float32)
    assert again.n_layers == 3
    torch.testing.assert_close(again(ids, rows), grown(ids, rows), rtol=0.05, atol=0.05)   # saved in bf16
    (tmp_path / "feature.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "layers"}))
    with pytest.raises(ModelLoadError, match="does not read"):
        load_feature_draft(target, tmp_path)
    (tmp_path / "feature.json").write_text(json.dumps({**meta, "layers": 0}))
    with pytest.raises(ModelLoadError, match="layers = 0"):
        load_feature_draft(target, tmp_path)


@torch.inference_mode()
def test_tapped_layers_are_the_layers_outputs_in_every_forward(feature_pair):
    """The lean forward, transformers' forward and training all hand the draft the same rows
    [final-normed | layer t's output ...], and layer t's output is what that layer returns."""
    target = feature_pair.target
    H = target.config.hidden_size
    ids = torch.tensor([feature_pair.tokenizer.encode("Tapping the middle of a network, layer by layer.")])
    seen = {}
    hooks = [target.model.layers[t].register_forward_hook(
        lambda mod, args, out, t=t: seen.__setitem__(t, (out[0] if isinstance(out, tuple) else out)[0].clone()))
        for t in TAPS]
    try:
        train_rows = target_features(target, ids, TAPS)[0]
    finally:
        for h in hooks:
            h.remove()
    assert train_rows.shape == (ids.shape[1], 4 * H)
    assert torch.equal(train_rows[:, :H], target.model(input_ids=ids).last_hidden_state[0])
    for k, t in enumerate(TAPS):
        assert torch.equal(train_rows[:, H * (k + 1):H * (k + 2)], seen[t]), t
    for fwd in (LeanLlama(target, 64), ModelForward(target, 64)):
        logits, rows = fwd(ids, 0, rows=2, hidden=True, taps=TAPS)
        torch.testing.assert_close(rows, train_rows, rtol=1e-4, atol=1e-4)
        _, plain = fwd(ids, 0, rows=2, hidden=True)
        assert plain.shape == (ids.shape[1], H)


@torch.inference_mode()
def test_a_draft_given_taps_starts_where_it_was_and_saves_them(untrained_pair, tmp_path):
    """Taps start at zero weight, so a warm start that adds them begins at the draft it was; a saved draft
    keeps its taps, and a directory whose taps the target lacks is refused."""
    import json

    from specviz.errors import ModelLoadError

    plain, target = untrained_pair.draft, untrained_pair.target
    tapped = FeatureDraft(target, plain.vocab_ids, torch.float32, TAPS)
    tapped.load_state_dict(plain.own_state(), strict=False)
    ids = torch.tensor([untrained_pair.tokenizer.encode("Zero-initialised taps change nothing at first.")])
    rows = target_features(target, ids, TAPS)
    H = target.config.hidden_size
    torch.testing.assert_close(tapped(ids, rows), plain(ids, rows[..., :H]))
    assert tapped(ids, rows[..., :H]).shape == (1, ids.shape[1], H)   # a predicted feature: no taps
    with torch.no_grad():
        tapped.fc_taps.weight.normal_(0, 0.02)
    assert not torch.allclose(tapped(ids, rows), plain(ids, rows[..., :H]))

    save_feature_draft(tapped, tmp_path, "default")
    (tmp_path / "vocab.json").write_text(json.dumps({"vocab_ids": plain.vocab_ids.tolist()}))
    again = load_feature_draft(target, tmp_path, torch.float32)
    assert again.taps == TAPS
    torch.testing.assert_close(again.fc_taps.weight, tapped.fc_taps.weight.to(torch.bfloat16).float())
    meta = json.loads((tmp_path / "feature.json").read_text())
    (tmp_path / "feature.json").write_text(json.dumps({**meta, "taps": [4, 29]}))
    with pytest.raises(ModelLoadError, match="taps layers"):
        load_feature_draft(target, tmp_path)
    (tmp_path / "feature.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "taps"}))
    with pytest.raises(ModelLoadError, match="does not read"):   # its taps' weights would be dropped
        load_feature_draft(target, tmp_path)
    with pytest.raises(ValueError, match="taps must be"):
        FeatureDraft(target, plain.vocab_ids, torch.float32, (30,))


def test_max_new_tokens_and_short_prompts(feature_pair):
    prompt_ids = [feature_pair.tokenizer.encode("The")[0]]
    ar = make_decoder("ar", feature_pair, "The", prompt_ids=prompt_ids, max_new_tokens=20).run()
    for max_new in (1, 2, 5, 20):
        trace = make_decoder("sequoia", feature_pair, "The", prompt_ids=prompt_ids, max_new_tokens=max_new,
                             **TREES["dp16"]).run()
        assert trace.token_ids == ar.token_ids[:max_new]


@pytest.mark.parametrize("pair", ["feature_pair", "two_layer_pair"])
@torch.inference_mode()
def test_decoding_forward_matches_the_unrolled_training_forward(pair, request):
    """What the decoder computes for a tree chain is what training unrolled: slot by slot, depth by depth
    (with every layer's cache, for a draft of two)."""
    pair = request.getfixturevalue(pair)
    draft, target = pair.draft, pair.target
    ids = torch.tensor([pair.tokenizer.encode("def reverse(s):\n    return s[::-1]\n\nprint(reverse")])
    feats = target_features(target, ids, draft.taps)[0]
    L = ids.shape[1]
    outs = unrolled(draft, ids[:, 1:], feats[None, :-1], 3)
    full = outs[0][0]   # the first unrolled step: the teacher-forced pass over the true features
    r = L - 5                                   # the root pair (f_r, x_{r+1}) sits at slot r
    fwd = FeatureDraftForward(draft, L + 4, int8=False)   # the int8 levels: the next test
    first = fwd(ids[0, 1:r - 3], feats[:r - 4], 0)               # committed pairs in two chunks
    second = fwd(ids[0, r - 3:r + 2], feats[r - 4:r + 1], r - 4)
    assert torch.allclose(torch.cat([first, second]), full[:r + 1], atol=1e-5)
    parent = second[-1]
    for depth in (1, 2):                        # a chain node at slot r + depth reads its parent's prediction
        slot = r + depth
        mask = torch.zeros(1, 1, 1, slot + 1)
        out = fwd(ids[0, slot + 1:slot + 2], parent[None], slot, mask=mask)
        assert torch.allclose(out[0], outs[depth][0, slot], atol=1e-4), depth
        parent = out[0]


@pytest.mark.parametrize("pair", ["feature_pair", "two_layer_pair"])
@torch.inference_mode()
def test_int8_decoding_levels_track_the_trained_draft(pair, request):
    """On a CPU the decoding forward runs its linears in weight-only int8 (every layer's): the features it
    predicts stay within quantisation error of the trained weights', and so do its proposals."""
    feature_pair = request.getfixturevalue(pair)
    draft, target = feature_pair.draft, feature_pair.target
    lin = torch.nn.Linear(64, 40, bias=True)
    x = torch.randn(3, 5, 64)
    q = Int8Rows.quantized(lin.weight, lin.bias, int8_kernel(lin.weight.device))
    assert q.codes.dtype == torch.int8 and q(x).shape == (3, 5, 40)
    assert (q(x) - lin(x)).abs().max() < 0.02 * lin(x).abs().max()
    # The decoding copy runs q|k|v and gate|up as one matrix each: the same rows, the same outputs.
    parts = [Int8Rows.quantized(torch.nn.Linear(64, m).weight, kernel=int8_kernel(x.device)) for m in (40, 8, 8)]
    torch.testing.assert_close(Int8Rows.stacked(parts)(x), torch.cat([p(x) for p in parts], -1))
    for layer in draft.int8_parts()[0].decoder_layers():
        assert {"qkv_proj", "gate_up_proj"} <= set(layer._modules) and "q_proj" not in layer._modules
    ids = torch.tensor([feature_pair.tokenizer.encode(
        "The three primary colours are red, yellow and blue. When you mix red and yellow you get orange, and "
        "when you mix blue and yellow you get green. Painters learn this early, because every other colour on "
        "the palette can be made from these three, plus white and black for the lighter and darker shades.")])
    feats = target_features(target, ids, draft.taps)[0]
    n = ids.shape[1] - 1
    exact = FeatureDraftForward(draft, n, int8=False)
    fast = FeatureDraftForward(draft, n, int8=True)
    assert fast.int8 and not exact.int8
    want = exact(ids[0, 1:], feats[:-1], 0)
    got = fast(ids[0, 1:], feats[:-1], 0)
    cos = torch.nn.functional.cosine_similarity(got.float(), want.float(), dim=-1)
    # Typically within 0.5% of the exact features (median 0.995-0.996); the worst position (the same for both
    # heads measured) read 0.9904 with step 18334 and 0.9891 with step 24837. The proposals below are the check.
    # Without VNNI (an AVX2-only CPU) fbgemm multiplies u8 x s8 pairs into 16-bit sums that may saturate: the
    # same draft read median 0.9897 and worst 0.9815 on an AVX2-only AMD EPYC, so the floor is the CPU's.
    from specviz.engine.machine import cpu_flags

    vnni = bool({"avx512_vnni", "avx_vnni", "amx_int8"} & set(cpu_flags()))
    median_floor, worst_floor = (0.99, 0.98) if vnni else (0.985, 0.975)
    assert cos.median() > median_floor and cos.min() > worst_floor, (cos.median(), cos.min(), cpu_flags())
    # Int8 moves the margin between the exact top two logits by up to ~0.7 nats here (median 0.13), so the
    # proposal may flip where they are near-tied (the 2-layer pair, whose second layer is random, flipped 7 of
    # 62 with the step-9662 head, every one at a margin under 0.2), never where the exact top-1 leads by a nat.
    exact_logits, fast_logits = exact.logits(want).float(), fast.logits(got).float()
    top2 = exact_logits.topk(2, -1).values
    decided = (top2[..., 0] - top2[..., 1]) >= 1.0
    same = fast_logits.argmax(-1) == exact_logits.argmax(-1)
    assert n >= 60 and int(decided.sum()) >= 15, (n, int(decided.sum()))
    flipped = int((~same[decided]).sum())
    # Without VNNI the coarser sums flipped 1 of 19 and 2 of 20 clear proposals on the AVX2-only EPYC (the output
    # stays exact either way: a flipped proposal is only a rejected one); with VNNI none may flip.
    allowed = 0 if vnni else max(1, int(0.1 * int(decided.sum())))
    assert flipped <= allowed, f"{flipped} of {int(decided.sum())} clear proposals flipped ({cpu_flags()})"
    assert draft.decoding_kind.startswith("feature") and "int8" not in draft.decoding_kind   # fp32 stays dense: the int8 kernel is slow with fp32 inputs


@pytest.mark.skipif(not fbgemm_available(), reason="fbgemm is built into x86 PyTorch wheels only")
@pytest.mark.parametrize("pair", ["feature_pair", "two_layer_pair"])
@torch.inference_mode()
def test_fp32_levels_run_the_int8_layers_as_the_decoder_feeds_them(pair, request):
    """Where fbgemm runs the int8 layers, a level skips the module's bf16 activations (a compiled `LayerStack`): the
    committed pairs in chunks (the later chunk sees the cache and, causally, itself) and a tree level under
    a mask in the models' dtype (a fixed tree's) predict what the exact draft does, within int8's rounding."""
    feature_pair = request.getfixturevalue(pair)
    draft, target = feature_pair.draft, feature_pair.target
    ids = torch.tensor([feature_pair.tokenizer.encode(
        "Rivers carve valleys over thousands of years. The water picks up sand and stones, and these scrape "
        "the riverbed as they roll downstream, so that the valley deepens a little with every flood.")])
    feats = target_features(target, ids, draft.taps)[0]
    L = ids.shape[1]
    fast, exact = FeatureDraftForward(draft, L + 4, int8=True), FeatureDraftForward(draft, L + 4, int8=False)
    assert isinstance(fast.layers, torch.jit.ScriptModule) and fast.dtype == torch.float32   # compiled
    assert len(fast.layers.layers) == draft.n_layers
    assert fast.fp32 and not exact.fp32 and not isinstance(exact.layers, torch.jit.ScriptModule)
    assert exact.dtype == draft.fc.weight.dtype
    r = L - 5
    got, want = [], []
    for fwd, out in ((fast, got), (exact, want)):
        out.append(fwd(ids[0, 1:r - 3], feats[:r - 4], 0))
        out.append(fwd(ids[0, r - 3:r + 2], feats[r - 4:r + 1], r - 4))   # 5 rows at slot r - 4: no mask given
        # Two siblings at depth 1 (slots r + 1, r + 2), each attending to the committed pairs and itself; a
        # fixed tree's mask comes in the models' dtype (bf16 on a CPU), which the fp32 levels convert.
        mask = torch.zeros(1, 1, 2, r + 3, dtype=torch.bfloat16 if fwd is fast else fwd.dtype)
        mask[..., 0, r + 2] = mask[..., 1, r + 1] = torch.finfo(mask.dtype).min
        level = fwd(ids[0, r + 2:r + 4], out[-1][-1:].expand(2, -1).to(fwd.dtype), r + 1,
                    positions=torch.tensor([r + 1, r + 1]), mask=mask)
        out.append(level)
        assert level.dtype == fwd.dtype
    cos = torch.nn.functional.cosine_similarity(torch.cat(got).float(), torch.cat(want).float(), dim=-1)
    assert cos.median() > 0.99 and cos.min() > 0.97, (cos.median(), cos.min())
    assert torch.isfinite(fast.logits(got[-1])).all()


@pytest.mark.skipif(not fbgemm_available(), reason="fbgemm is built into x86 PyTorch wheels only")
@torch.inference_mode()
def test_fbgemm_and_int8pack_kernels_read_the_same_int8_weights(untrained_pair):
    """Both kernels compute x W^T from the same int8 rows and scales; fbgemm also rounds x to 8 (7 without
    VNNI) bits per call, so the two agree within that rounding at a tree level's 1 to 8 rows, in bf16."""
    gen = torch.Generator().manual_seed(0)
    weight = (torch.randn(300, 96, generator=gen) * 0.05).to(torch.bfloat16)
    bias = torch.randn(300, generator=gen).to(torch.bfloat16)
    fast, slow = Int8Rows.quantized(weight, bias, int8_kernel(weight.device)), Int8Rows.quantized(weight, bias)
    assert fast.kernel == "fbgemm" and fast.packed is not None and slow.packed is None
    assert torch.equal(fast.codes, slow.codes) and torch.equal(fast.scales, slow.scales)
    for rows in (1, 3, 8):
        x = torch.randn(rows, 96, generator=gen).to(torch.bfloat16)
        want, got = slow(x).float(), fast(x).float()
        assert got.dtype == torch.float32 and fast(x).dtype == torch.bfloat16
        assert (got - want).abs().max() < 0.03 * want.abs().max(), rows
    # A cut (a head's rows) and a stack (q|k|v) keep the kernel and give the same rows' outputs.
    ids = torch.tensor([5, 0, 299])
    x = torch.randn(2, 96, generator=gen).to(torch.bfloat16)
    assert fast.cut(ids).kernel == "fbgemm"
    torch.testing.assert_close(fast.cut(ids)(x), fast(x)[:, ids])
    # The fusion layers keep gpt-fast's kernel: one activation scale over cat(embedding, feature) rounds
    # the small embedding half away (measured: held-out agreement 0.20 instead of 0.66).
    layers = untrained_pair.draft.int8_parts()[0]
    assert layers.fc.kernel == "int8pack" and layers.qkv_proj.kernel == "fbgemm"
    assert untrained_pair.draft.int8_parts()[2].kernel == "fbgemm"


def test_int8_weights_are_quantised_once_until_the_draft_changes(untrained_pair):
    draft = untrained_pair.draft
    layer, head, own_head = draft.int8_parts()
    # A decoder per prompt reuses them (the head over the draft's own rows is packed for its kernel once).
    assert draft.int8_parts()[0] is layer and draft.int8_parts()[1] is head and draft.int8_parts()[2] is own_head
    torch.testing.assert_close(own_head.codes, head.cut(draft.vocab_ids).codes)
    assert layer.fc is not draft.fc and isinstance(draft.fc, torch.nn.Linear)  # the trained module is untouched
    ids = torch.tensor([3, 17, 40000])
    torch.testing.assert_close(head.cut(ids).codes, Int8Rows.quantized(untrained_pair.target.lm_head.weight[ids]).codes)
    with torch.no_grad():
        draft.fc.bias.add_(1.0)   # a training step: the quantised copy must follow
    try:
        assert draft.int8_parts()[0] is not layer
        torch.testing.assert_close(draft.int8_parts()[0].fc.bias, draft.fc.bias)
    finally:
        with torch.no_grad():
            draft.fc.bias.sub_(1.0)


def test_unroll_mask_is_a_tree_chain():
    m = unroll_mask(6, 2, "cpu")
    j = 4   # a depth-3 query at slot 4: true keys up to slot 2, predicted keys of slot 3 (step 1) and 4 (step 2)
    assert m[j, :6].tolist() == [True, True, True, False, False, False]
    assert m[j, 6:12].tolist() == [False, False, False, True, False, False]
    assert m[j, 12:].tolist() == [False, False, False, False, True, False]


def test_comb_tree_and_acceptance_by_depth(one_thread):
    parents = _comb(3, 3, 0)[0]
    shape = TreeShape.from_parents(parents)
    assert shape.depth == 3 and shape.size == 10 and shape.children[1] == [4, 5, 6] and shape.children[4] == [7, 8, 9]
    pair = tiny_feature_pair()
    result = profile_acceptance_by_depth(pair, ["x"], 3, 3, SamplingConfig(0.0), steps=20, max_new_tokens=12,
                                         show_progress=False, save=False)
    assert len(result["acceptance_by_depth"]) == 3 and result["acceptance"] == result["acceptance_by_depth"][0]
    assert all(sum(row) <= 1 + 1e-9 for row in result["acceptance_by_depth"])
    assert result["reached_by_depth"][0] == 20 >= result["reached_by_depth"][1] >= result["reached_by_depth"][2]
    lower = result["acceptance_under_lower_ranks"]
    assert len(lower) == 3 and lower[0] == result["acceptance"] and all(len(r) == 3 for r in lower[1:])
    assert all(sum(row) <= 1 + 1e-9 for row in lower)


def test_comb_with_lower_ranked_children_counts_each_class_apart():
    # Level 2 holds node 1's children (4-6), then node 2's (7, 8) and node 3's (9, 10); level 3
    # node 4's (11-13), then node 5's (14, 15) and node 6's (16, 17).
    parents, chain, lower = _comb(3, 3, 2)
    assert parents == [-1, 0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5, 6, 6] == _comb(3, 3, 2)[0]
    assert chain == [0, 1, 4, 11] and lower == [[], [(2, 7), (3, 9)], [(5, 14), (6, 16)]]
    assert TreeShape.from_parents(parents).depth == 3
    counts, reached = [[0] * 3 for _ in range(3)], [0] * 3
    lower_counts, lower_reached = [[0] * 2 for _ in range(3)], [0] * 3
    for path in ([], [1], [2], [2, 7], [1, 4], [1, 5, 14], [1, 4, 11], [3, 10], [1, 6, 17]):
        _count_step(path, chain, lower, 2, counts, reached, lower_counts, lower_reached)
    assert counts == [[5, 2, 1], [2, 1, 1], [1, 0, 0]] and reached == [9, 5, 2]
    # Depth 2 under nodes 2 and 3: reached by [2], [2, 7], [3, 10], which accepted ranks 1 and 2;
    # depth 3 under nodes 5 and 6 (node 4 is the chain's): ranks 1 and 2 again.
    assert lower_counts == [[0, 0], [1, 1], [1, 1]] and lower_reached == [0, 3, 2]
    # Few steps under a lower rank lean on the rank-1 row.
    assert lower_row([1, 1], 3, [0.5, 0.2]) == pytest.approx([(1 + 5.0) / 13, (1 + 2.0) / 13], abs=1e-6)


def _all_trees(n: int):
    def rec(par):
        if len(par) == n:
            yield list(par)
            return
        for p in range(par[-1] if len(par) > 1 else 0, len(par)):
            yield from rec(par + [p])
    yield from rec([-1])


def expected_tokens(parents: list[int], by_depth, lower=None) -> float:
    """A tree's expected tokens per step, F(T), from its definition and written apart from `tree_value`:
    1 for the root plus, for every node, the probability that the walk reaches and accepts it, a child at
    level L and rank r accepted with by_depth[L - 1][r - 1] (the last row for deeper levels), or the
    `lower` row when its parent was drawn at rank 2 or below."""
    children = {i: [j for j, p in enumerate(parents) if p == i] for i in range(len(parents))}

    def value(node: int, depth: int, rank: int) -> float:
        table = lower if lower is not None and depth >= 1 and rank >= 2 else by_depth
        row = table[min(depth, len(table) - 1)]
        return 1.0 + sum((row[r] if r < len(row) else 0.0) * value(kid, depth + 1, r + 1)
                         for r, kid in enumerate(children[node]))

    return value(0, 0, 1)


def test_per_depth_dp_equals_exhaustive_search():
    rows = [[0.6, 0.15, 0.05], [0.45, 0.15, 0.05], [0.3, 0.12, 0.05]]
    tables = build_tables(None, 8, 4, by_depth=rows)
    for n, d in itertools.product(range(2, 8), range(1, 5)):
        best = -1.0
        for parents in _all_trees(n):
            shape = TreeShape.from_parents(parents)
            if shape.depth <= d and max(len(c) for c in shape.children) <= 3:
                best = max(best, expected_tokens(parents, rows))
                assert tree_value(parents, None, by_depth=rows) == pytest.approx(expected_tokens(parents, rows))
        value = tables.best[d, n]
        if best < 0:
            assert not np.isfinite(value)
            continue
        assert value == pytest.approx(best, abs=1e-9), (n, d)
        assert expected_tokens(tables.parents(n, d), rows) == pytest.approx(value, abs=1e-9)
    flat = build_tables(rows[0], 12, 5)
    same = build_tables(rows[0], 12, 5, by_depth=[rows[0], rows[0]])
    assert np.array_equal(np.isfinite(flat.best), np.isfinite(same.best))
    assert np.allclose(flat.best[np.isfinite(flat.best)], same.best[np.isfinite(same.best)])


def test_shipped_feature_acceptance_vectors_are_found_per_depth_at_both_temperatures():
    # What `--tree auto` uses on a machine that has measured nothing: one vector per tree level,
    # at T=0 and T=0.6, for exactly this pair's names.
    import json

    from specviz.paths import assets_dir
    from specviz.sequoia.acceptance import _by_depth, _shipped
    from specviz.sequoia.cli import acceptance_prompts

    meta = json.loads((OFFLINE_FEATURE_DRAFT_DIR / "feature.json").read_text())
    files = sorted((assets_dir() / "acceptance").glob("*feature-draft*.json"))
    assert len(files) == 2
    names = json.loads(files[0].read_text())
    found = _shipped(names["target"], names["draft"])
    assert sorted(v["temperature"] for v in found) == [0.0, 0.6]
    for v in found:
        rows = _by_depth(v)
        assert rows is not None and len(rows) == 4 and all(0 < sum(r) <= 1 for r in rows)
        assert v["steps"] >= 400 and "heldout" in v["prompts"]
        # Measured with the shipped checkpoint: retraining the draft means re-measuring its acceptance.
        assert v["draft_checkpoint_step"] == meta["steps_done"]
    assert meta["kind"] == "specviz-feature-draft"
    # Measured on the held-out prompts, which the drafts never trained on.
    from specviz.draft.data import load_prompts

    heldout = acceptance_prompts(None)
    train = {r["prompt"] for r in load_prompts("train")}
    assert len(heldout) == 22 and not set(heldout) & train


def test_online_features_equal_the_stored_recipe_and_a_deadline_ends_the_run(feature_pair, tmp_path, monkeypatch):
    """`distill --kind feature --online-features --minutes M`, as a lent GPU runs it: the parallel
    tokenising gives exactly the batches of the stored-feature recipe, the target's features are computed
    in the loop, and the schedule is cut so the run, checkpoints included, ends by its deadline."""
    import json
    import time

    from specviz.draft import featuretrain
    from specviz.draft.data import DistillData
    from specviz.draft.featuretrain import fit_steps, online_features, train_feature

    waits = []   # each step's and checkpoint's seconds: how slow this machine is
    fit = featuretrain.DeadlinePace.steps_after

    def recorded(self, step, duration, steps, checkpoint_seconds):
        waits.append(duration + checkpoint_seconds)
        return fit(self, step, duration, steps, checkpoint_seconds)

    monkeypatch.setattr(featuretrain.DeadlinePace, "steps_after", recorded)
    tok, target = feature_pair.tokenizer, feature_pair.target
    work, rows, settings = _deadline_run_inputs(tok, tmp_path, save_every=40)
    stream = online_features(target, tok, work, settings, workers=2)
    sequential = DistillData(tok, rows, 3, 32, 2, 1, 0.4)
    assert stream.ids.shape == (12, 2, 32)
    for k in (0, 5, 11):
        assert torch.equal(stream.ids[k], sequential.batch_at(k))
    ids, feats = stream.batch_at(13)   # wraps around: batch 13 reuses batch 1's ids
    assert torch.equal(ids, stream.ids[1]) and feats.shape == (2, 32, target.config.hidden_size)

    budget = 40.0
    t0 = time.perf_counter()
    metrics = train_feature(target, tok, settings, tmp_path / "out", work, resume=False, stream=stream,
                            deadline=t0 + budget)
    elapsed = time.perf_counter() - t0
    assert 20 <= settings["steps"] < 100_000   # fitted to the deadline once 20 steps were timed
    assert len(metrics["loss"]) == settings["steps"]
    assert metrics["agreement"][-1][0] == settings["steps"]   # the last checkpoint is the run's end
    # It uses its time, and ends by the deadline unless the 20 timed steps alone overran it (a loaded
    # machine), in which case it stops right there. By the deadline means give or take its slowest step and
    # checkpoint: 8 s covers them on a quiet machine (0.2 s steps); a slower one's own slowest counts too.
    slack = max(8.0, max(waits) + 1.0)
    assert elapsed > 0.6 * budget, f"the run stopped after {elapsed:.0f} s of a {budget:.0f} s budget"
    assert settings["steps"] == 20 or elapsed < budget + slack, (
        f"{elapsed:.0f} s for a {budget:.0f} s deadline (slack {slack:.1f} s)")
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert saved["steps_done"] == settings["steps"]
    assert fit_steps(1000, 30, 0.5, 10.0) == 50 and fit_steps(40, 30, 0.5, 100.0) == 40
    assert fit_steps(1000, 30, 0.5, -5.0) == 30   # past the deadline: stop where it is


def _deadline_run_inputs(tok, tmp_path, save_every: int):
    """A work dir of two tiny answers and the settings of a run that only a deadline ends."""
    import json

    from specviz.draft.data import chat_ids
    from specviz.engine.models import OFFLINE_DRAFT_DIR

    work = tmp_path / "work"
    work.mkdir()
    rows = []
    for prompt, answer in [("Name a colour.", "Blue is a colour of the sky."), ("Say hi.", "Hi! How are you today?")]:
        rows.append({"prompt": prompt, "temperature": 0.0, "prompt_ids": chat_ids(tok, prompt),
                     "answer_ids": tok(answer, add_special_tokens=False)["input_ids"]})
    (work / "answers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (work / "heldout.jsonl").write_text(json.dumps(rows[0]) + "\n")
    settings = {"target": "default", "seed": 3, "seq_len": 32, "batch": 2, "answer_rows": 1, "chat_wrap": 0.4,
                "feature_batches": 12, "vocab_from": str(OFFLINE_DRAFT_DIR), "unroll": 2,
                "unroll_weights": [1.0, 0.8], "noise": 0.1, "ce_weight": 1.0, "lr": 5e-4, "warmup": 25,
                "steps": 100_000, "save_every": save_every, "log_every": 1000}
    return work, rows, settings


@pytest.mark.parametrize("slow_steps", ["after the fit", "during the fit"])
def test_a_deadline_holds_when_the_machine_changes_pace(feature_pair, tmp_path, slow_steps, monkeypatch):
    """A shared GPU or a loaded CPU changes pace during a run. Slower after the first 20 timed steps, the
    run still ends by its deadline (the last step's time guards it, and the length is refitted to the recent
    pace); slower only during them, it lengthens again and uses its time instead of stopping early."""
    import json
    import time

    from specviz.draft import featuretrain
    from specviz.draft.featuretrain import FIT_AFTER, OnlineFeatures, online_features, train_feature

    lengths, waits = [], []   # the run's length after each step; each step's and checkpoint's seconds
    fit = featuretrain.DeadlinePace.steps_after

    def recorded(self, step, duration, steps, checkpoint_seconds):
        lengths.append(fit(self, step, duration, steps, checkpoint_seconds))
        waits.append(duration + checkpoint_seconds)
        return lengths[-1]

    monkeypatch.setattr(featuretrain.DeadlinePace, "steps_after", recorded)

    class ChangingPace(OnlineFeatures):
        def __init__(self, stream, slow):
            super().__init__(stream.target, stream.ids, stream.taps)
            self.slow = slow

        def batch_at(self, k):
            if self.slow(k):
                time.sleep(0.4)   # this tiny run's step takes about 0.2 s here: a 3x slower machine
            return super().batch_at(k)

    tok, target = feature_pair.tokenizer, feature_pair.target
    work, _, settings = _deadline_run_inputs(tok, tmp_path, save_every=10)
    stream = online_features(target, tok, work, settings, workers=1)
    slow = (lambda k: k >= FIT_AFTER + 5) if slow_steps == "after the fit" else (lambda k: 0 < k < FIT_AFTER // 2)
    budget = 20.0
    t0 = time.perf_counter()
    metrics = train_feature(target, tok, settings, tmp_path / "out", work, resume=False,
                            stream=ChangingPace(stream, slow), deadline=t0 + budget)
    elapsed = time.perf_counter() - t0
    assert len(metrics["loss"]) == settings["steps"] == metrics["agreement"][-1][0]
    first = next(n for n in lengths if n != 100_000)   # the length fitted after the first timed steps
    # A machine so loaded that the timed steps alone spent the budget ends right there (CI beside other work
    # ran 1.3-1.7 s steps); otherwise the run ends by the deadline, give or take its slowest step and a
    # checkpoint (under a second each on a quiet machine; the old fit-once code took 43.9 s, "during" 15.2 s).
    if first > FIT_AFTER:
        slack = max(waits) + 1.0
        assert elapsed < budget + slack, f"{elapsed:.1f} s for a {budget:.0f} s deadline (slack {slack:.1f} s)"
        assert elapsed > 0.7 * budget, f"the run stopped after {elapsed:.1f} s of a {budget:.0f} s budget"
        if slow_steps == "after the fit":
            # Only a run whose first fit reaches well into the slow steps has a pace to fall (CI once fitted
            # 22 steps after 20 slow-machine ones: the slow steps, from 25 on, never ran).
            if first >= FIT_AFTER + 5 + 5:
                assert settings["steps"] < first   # shortened as the pace fell
        else:
            assert settings["steps"] > first   # lengthened as the pace recovered
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["steps_done"] == settings["steps"]


def test_a_warm_start_continues_a_shipped_draft_and_keeps_counting(feature_pair, tmp_path):
    """`distill --kind feature --init-from DIR`: a machine without the earlier run's work dir trains the shipped
    draft further. The weights it starts from are the shipped ones, its step counts and token counts continue
    from theirs, the shipped run's settings join the history, and a draft with another head vocabulary is
    refused with a message instead of being silently mixed."""
    import json

    from specviz.draft.data import chat_ids
    from specviz.draft.feature import load_feature_draft
    from specviz.draft.featuretrain import online_features, train_feature
    from specviz.engine.models import OFFLINE_DRAFT_DIR
    from specviz.errors import InvalidInput

    tok, target = feature_pair.tokenizer, feature_pair.target
    shipped = json.loads((OFFLINE_FEATURE_DRAFT_DIR / "metrics.json").read_text())
    work = tmp_path / "work"
    work.mkdir()
    row = {"prompt": "Say hi.", "temperature": 0.0, "prompt_ids": chat_ids(tok, "Say hi."),
           "answer_ids": tok("Hi! How are you today?", add_special_tokens=False)["input_ids"]}
    (work / "answers.jsonl").write_text(json.dumps(row) + "\n")
    (work / "heldout.jsonl").write_text(json.dumps(row) + "\n")
    settings = {"target": "default", "seed": 1, "seq_len": 32, "batch": 2, "answer_rows": 1, "chat_wrap": 0.4,
                "feature_batches": 4, "vocab_from": str(OFFLINE_DRAFT_DIR), "unroll": 2,
                "unroll_weights": [1.0, 0.8], "noise": 0.1, "ce_weight": 1.0, "lr": 0.0, "warmup": 1,
                "steps": 3, "save_every": 3, "log_every": 1000}
    stream = online_features(target, tok, work, settings, workers=1)
    out = tmp_path / "out"
    metrics = train_feature(target, tok, settings, out, work, resume=False, stream=stream,
                            init_from=OFFLINE_FEATURE_DRAFT_DIR)
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["steps_done"] == shipped["steps_done"] + 3
    assert metrics["tokens_seen"] == shipped["tokens_seen"] + 3 * 2 * 32
    assert [s for s, _ in metrics["loss"]] == [s for s, _ in shipped["loss"]] + [shipped["steps_done"] + k
                                                                              for k in (1, 2, 3)]
    # The shipped curve stays; the step it starts from is re-measured once (on this test's held-out row), not twice.
    assert metrics["agreement"][:-2] == shipped["agreement"][:-1]
    assert [s for s, _ in metrics["agreement"][-2:]] == [shipped["steps_done"], shipped["steps_done"] + 3]
    written = json.loads((out / "settings.json").read_text())
    assert written["init_from"]["steps_done"] == shipped["steps_done"]
    assert written["history"][-1]["until_step"] == shipped["steps_done"]
    # At learning rate 0 the weights stay the shipped ones: the warm start loaded them all.
    again, ref = load_feature_draft(target, out, torch.float32), feature_pair.draft
    assert all(torch.equal(v, ref.state_dict()[k].float()) for k, v in again.own_state().items())

    other = tmp_path / "other"
    other.mkdir()
    for name in ("feature.safetensors", "feature.json"):
        (other / name).write_bytes((OFFLINE_FEATURE_DRAFT_DIR / name).read_bytes())
    (other / "vocab.json").write_text(json.dumps({"vocab_ids": list(range(100))}))
    with pytest.raises(InvalidInput, match="head vocabulary differs"):
        train_feature(target, tok, dict(settings), tmp_path / "out2", work, resume=False, stream=stream,
                      init_from=other)


@pytest.mark.parametrize("args, message", [
    (["--init-from", "assets/draft-feature-smollm2-135m", "--resume"], "choose one"),
    (["--init-from", "no/such/dir"], "not a feature-draft directory"),
    (["--taps", "2,mid"], "comma-separated layer numbers"),
    (["--taps", "29"], "layers 0..28"),
    (["--taps", "2", "--init-from", "TAPPED"], "was trained with taps [4, 14]"),
    (["--feature-layers", "0"], "between 1 and 8"),
    (["--feature-layers", "1", "--init-from", "TAPPED"], "has 2 layers; a warm start may add layers, not drop"),
])
def test_distill_warm_start_mistakes_are_one_line_errors(args, message, tmp_path):
    import subprocess
    import sys

    tapped = tmp_path / "tapped"   # a draft directory of two layers trained with taps 4 and 14
    tapped.mkdir()
    (tapped / "feature.json").write_text('{"kind": "specviz-feature-draft", "taps": [4, 14], "layers": 2}')
    (tapped / "feature.safetensors").write_bytes(b"")
    args = [str(tapped) if a == "TAPPED" else a for a in args]
    result = subprocess.run([sys.executable, "-m", "specviz", "distill", "--kind", "feature", "--out",
                             str(tmp_path / "out"), "--work", str(tmp_path / "work"), *args],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert message in result.stderr
    assert not (tmp_path / "work").exists()   # refused before anything was written


def test_dp_with_parent_rank_classes_equals_exhaustive_search():
    # Children of a rank-2-or-lower node have their own, lower vectors: the DP must value every
    # subtree by the class its root's rank gives it, as the exhaustive search does node by node.
    rows = [[0.6, 0.15, 0.05], [0.5, 0.15, 0.05], [0.4, 0.12, 0.05]]
    lower = [[0.6, 0.15, 0.05], [0.3, 0.1, 0.0], [0.2, 0.05, 0.0]]
    tables = build_tables(None, 8, 4, by_depth=rows, under_lower_ranks=lower)
    for n, d in itertools.product(range(2, 8), range(1, 5)):
        best = -1.0
        for parents in _all_trees(n):
            shape = TreeShape.from_parents(parents)
            if shape.depth <= d and max(len(c) for c in shape.children) <= 3:
                best = max(best, expected_tokens(parents, rows, lower))
                assert tree_value(parents, None, by_depth=rows, under_lower_ranks=lower) == \
                    pytest.approx(expected_tokens(parents, rows, lower))
        value = tables.best[d, n]
        if best < 0:
            assert not np.isfinite(value)
            continue
        assert value == pytest.approx(best, abs=1e-9), (n, d)
        assert expected_tokens(tables.parents(n, d), rows, lower) == pytest.approx(value, abs=1e-9)
    # The lower class changes the choice: the rank-2 node's child of the per-depth tree becomes a
    # third child of the root.
    plain = build_tables(None, 8, 4, by_depth=rows)
    assert plain.parents(6, 2) == [-1, 0, 0, 1, 1, 2] and tables.parents(6, 2) == [-1, 0, 0, 0, 1, 1]
    # Equal classes are the per-depth DP exactly.
    same = build_tables(None, 12, 5, by_depth=rows, under_lower_ranks=rows)
    per_depth = build_tables(None, 12, 5, by_depth=rows)
    assert np.array_equal(np.isfinite(same.best), np.isfinite(per_depth.best))
    assert np.allclose(same.best[np.isfinite(same.best)], per_depth.best[np.isfinite(per_depth.best)])


def test_draft_eval_reports_agreement_by_kind_of_prompt(capsys):
    """`draft-eval` splits its held-out agreement by the prompts' category (as Sequoia runs the head): the
    categories partition the positions, and the pooled figure is their position-weighted mean."""
    import json

    from specviz.cli import main
    from specviz.draft.data import load_prompts

    limit = 6
    assert main(["draft-eval", "--draft", "feature", "--limit", str(limit), "--tokens", "12", "--repeats", "1",
                 "--threads", "2"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{"):])
    by_kind = result["agreement_by_category"]
    kinds = [str(p.get("category")) for p in load_prompts("heldout")[:limit]]
    assert sorted(by_kind) == sorted(set(kinds)) and len(by_kind) >= 2
    assert {k: v["prompts"] for k, v in by_kind.items()} == {k: kinds.count(k) for k in set(kinds)}
    assert sum(v["positions"] for v in by_kind.values()) == result["positions"]
    pooled = sum(v["depth1"] * v["positions"] for v in by_kind.values()) / result["positions"]
    assert abs(pooled - result["agreement_by_depth"]["depth1"]) < 1e-3


def test_distill_answers_only_completes_the_answers_and_trains_nothing(tmp_path):
    """`distill --answers-only`, run on a CPU before a GPU lease: it generates exactly the answers the work dir
    lacks (resumable), then stops before any training, so the lease is spent on training alone."""
    import json

    from specviz.cli import main
    from specviz.draft.data import load_prompts, read_jsonl

    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    train, heldout = load_prompts("train"), load_prompts("heldout")

    def done(rows):
        return "".join(json.dumps({"prompt": r["prompt"], "category": r.get("category"), "temperature": 0.0,
                                   "prompt_ids": [1], "answer_ids": [2]}) + "\n" for r in rows)

    (work / "answers.jsonl").write_text(done(train[1:]))   # the first train prompt is still unanswered
    (work / "heldout.jsonl").write_text(done(heldout))
    rc = main(["distill", "--kind", "feature", "--out", str(out), "--work", str(work), "--answers-only",
               "--answer-temperatures", "0", "--gen-tokens", "3", "--device", "cpu"])
    assert rc == 0
    answers = read_jsonl(work / "answers.jsonl")
    assert len(answers) == len(train) and answers[-1]["prompt"] == train[0]["prompt"]
    assert 1 <= len(answers[-1]["answer_ids"]) <= 3 and answers[-1]["prompt_ids"] != [1]
    assert len(read_jsonl(work / "heldout.jsonl")) == len(heldout)
    assert not (out / "feature.safetensors").exists() and not (work / "feature_state.pt").exists()


@torch.inference_mode()
def test_beside_a_q4_target_the_draft_runs_on_the_kernel_and_tracks_the_trained_draft():
    """Beside a q4 target on SpecViz's kernel the feature draft's fusion and layers are Q8_0 on the same kernel
    (`quant.kernel_copy`: each layer one `q8_layer` op), not fbgemm: what it predicts stays within quantisation
    error of the trained weights', and no clearly decided proposal flips. Control: the copy's products are
    really the kernel's (a bf16 or fbgemm module here would pass the closeness checks too)."""
    from specviz.engine import kernels
    from specviz.engine import native
    from specviz.engine.native import q4_rows_available

    if q4_rows_available() is not None:
        pytest.skip(f"SpecViz's q4 kernel is not built here: {q4_rows_available()}")
    pair = load_pair("default", "feature", dtype="q4")
    draft = pair.draft
    parts = draft.int8_parts()[0]
    assert isinstance(parts.fc, kernels.Q8Rows) and parts.fc.bias is not None
    stack = FeatureDraftForward(draft, 8).layers
    assert all(getattr(layer, "original_name", type(layer).__name__) == "Q4Layer" and layer.q8
               for layer in stack.layers)
    # Its measured level costs are named with the kernel's source, as the target's are: a changed kernel re-measures.
    assert draft.decoding_kind == f"feature-q8head-q8layers-{native.source_digest()}"
    ids = torch.tensor([pair.tokenizer.encode(
        "The three primary colours are red, yellow and blue. When you mix red and yellow you get orange, and "
        "when you mix blue and yellow you get green. Painters learn this early, because every other colour on "
        "the palette can be made from these three, plus white and black for the lighter and darker shades.")])
    feats = target_features(pair.target, ids, draft.taps)[0]
    n = ids.shape[1] - 1
    exact, fast = FeatureDraftForward(draft, n, int8=False), FeatureDraftForward(draft, n)
    want, got = exact(ids[0, 1:], feats[:-1], 0), fast(ids[0, 1:], feats[:-1], 0)
    cos = torch.nn.functional.cosine_similarity(got.float(), want.float(), dim=-1)
    assert cos.median() > 0.99 and cos.min() > 0.98, (cos.median(), cos.min())
    exact_logits, fast_logits = exact.logits(want).float(), fast.logits(got).float()
    top2 = exact_logits.topk(2, -1).values
    decided = (top2[..., 0] - top2[..., 1]) >= 1.0
    assert int(decided.sum()) >= 15
    assert bool((fast_logits.argmax(-1) == exact_logits.argmax(-1))[decided].all())


def test_q8_0_quantiser_is_llama_cpps_and_the_kernel_multiplies_it():
    """`quant.quantize_q8_0`: d = max |w| / 127 per block of 32, codes round(w / d); the kernel's product over
    those codes equals the dequantised matrix's within the activations' int8 rounding."""
    from specviz.engine import kernels, quant
    from specviz.engine.native import q4_rows_available

    gen = torch.Generator().manual_seed(3)
    w = torch.randn(48, 96, generator=gen)
    q = quant.quantize_q8_0(w)
    assert q.codes.dtype == torch.int8 and int(q.codes.abs().max()) == 127 and q.d.shape == (48, 3)
    assert (q.dequantize() - w).abs().max() <= q.d.float().max() / 2 + 1e-3
    if q4_rows_available() is not None:
        return
    x = torch.randn(3, 96, generator=gen)
    bias = torch.randn(48, generator=gen)
    got = kernels.Q8Rows.of(q, bias=bias)(x)
    want = x @ q.dequantize().T + bias
    assert (got - want).abs().max() < 0.02 * want.abs().max()

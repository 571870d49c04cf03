"""The shipped distilled draft of the offline default: it loads, shares the target, and agrees with it."""

from __future__ import annotations

import json

import pytest
import torch

from specviz.draft.data import chat_ids, generate_batch, load_prompts
from specviz.draft.evaluate import agreement, heldout_sequences
from specviz.draft.pruned import META_FILE, WEIGHTS_FILE, build_draft, load_offline_draft, parse_layers, save_draft
from specviz.draft.vocab import VOCAB_FILE
from specviz.engine.lean import VocabSubsetHead
from specviz.engine.models import OFFLINE_DRAFT_DIR, load_pair
from specviz.errors import InvalidInput, ModelLoadError

AGREEMENT_BAR = 0.6  # issue 4
REGRESSION_FLOOR = 0.2
# A fixed held-out sample: one prompt of each kind, never trained on (split "heldout").
SAMPLE = ["What are three simple ways to reduce stress?",
          "Write a Python function that checks if a year is a leap year.",
          "What is 15% of 320?",
          "Explain how rainbows form.",
          "Write a short story about a squirrel who opens a bakery."]


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    return load_pair("default", "independent", device="cpu", dtype="bf16")


def test_shipped_checkpoint_is_small_and_has_no_embeddings():
    weights = OFFLINE_DRAFT_DIR / WEIGHTS_FILE
    assert weights.stat().st_size <= 50 * 1024 * 1024
    from safetensors import safe_open

    with safe_open(str(weights), "pt") as fh:
        names = list(fh.keys())
    assert not any(n.startswith(("model.embed_tokens", "lm_head")) for n in names)
    meta = json.loads((OFFLINE_DRAFT_DIR / META_FILE).read_text())
    assert 1 <= len(meta["target_layers"]) <= 6
    for name in ("metrics.json", "settings.json", "config.json"):
        assert (OFFLINE_DRAFT_DIR / name).exists()


def test_default_pair_uses_the_distilled_draft_sharing_the_target(pair):
    assert not pair.draft_is_target
    assert pair.draft_name.startswith("SpecViz distilled draft (")
    assert pair.draft.config.vocab_size == pair.target.config.vocab_size == pair.vocab_size
    # Shared, not copied: the same storage for the embedding and the lm_head.
    assert pair.draft.model.embed_tokens.weight.data_ptr() == pair.target.model.embed_tokens.weight.data_ptr()
    # The head keeps part of the vocabulary (vocab.json), cut from the target's shared head.
    head = pair.draft.lm_head
    assert isinstance(head, VocabSubsetHead) and head.full_weight.data_ptr() == pair.target.lm_head.weight.data_ptr()
    assert 4096 <= head.vocab_ids.numel() < pair.vocab_size
    assert set(pair.tokenizer.all_special_ids) <= set(head.vocab_ids.tolist())
    assert pair.draft.config.num_hidden_layers < pair.target.config.num_hidden_layers
    assert all(p.dtype == pair.dtype for p in pair.draft.parameters())
    ids = torch.tensor([chat_ids(pair.tokenizer, "Hello!")])
    with torch.inference_mode():
        logits = pair.draft(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], pair.vocab_size)
    assert torch.isfinite(logits[..., head.vocab_ids]).all()
    outside = torch.ones(pair.vocab_size, dtype=torch.bool)
    outside[head.vocab_ids] = False
    assert (logits[..., outside] == float("-inf")).all()


@pytest.fixture(scope="module")
def heldout_agreement(pair):
    heldout = {p["prompt"] for p in load_prompts("heldout")}
    train = {p["prompt"] for p in load_prompts("train")}
    assert set(SAMPLE) <= heldout and not set(SAMPLE) & train
    prompt_ids = [chat_ids(pair.tokenizer, p) for p in SAMPLE]
    answers = generate_batch(pair.target, pair.tokenizer, prompt_ids, 48, 0.0, torch.Generator())
    seqs = heldout_sequences(pair.target, [{"prompt_ids": p, "answer_ids": a} for p, a in zip(prompt_ids, answers)])
    assert sum(int(s[2].numel()) for s in seqs) >= 150
    return agreement(pair.draft, seqs)


def test_draft_is_a_trained_draft_on_heldout_sample(heldout_agreement):
    # The untrained layer-pruned start agrees on 0-6% of positions; the shipped checkpoint measured
    # about 0.37 on the full held-out set. A broken load (wrong layers, unshared embeddings) lands near 0.
    assert heldout_agreement >= REGRESSION_FLOOR, f"held-out agreement {heldout_agreement:.3f}"


@pytest.mark.xfail(strict=True, reason="issue 4 open: the CPU-trained draft (800 steps, 1.6M tokens) "
                                       "agrees on about 0.37 of held-out positions, below the 0.6 bar")
def test_draft_reaches_the_agreement_bar(heldout_agreement):
    assert heldout_agreement >= AGREEMENT_BAR, f"held-out greedy top-1 agreement {heldout_agreement:.3f}"


def test_save_and_load_round_trip_shares_embeddings(pair, tmp_path):
    draft = build_draft(pair.target, [0, 29], torch.bfloat16).eval()
    save_draft(draft, tmp_path, [0, 29], "default")
    loaded = load_offline_draft(pair.target, tmp_path)
    ids = torch.tensor([chat_ids(pair.tokenizer, "Write a haiku.")])
    with torch.inference_mode():
        torch.testing.assert_close(loaded(input_ids=ids).logits, draft(input_ids=ids).logits)
    assert loaded.config.num_hidden_layers == 2
    assert loaded.model.embed_tokens is pair.target.model.embed_tokens


def test_bad_layers_and_dirs_are_clear_errors(pair, tmp_path):
    with pytest.raises(InvalidInput, match="layers"):
        parse_layers("0,x", 30)
    with pytest.raises(InvalidInput, match="layers"):
        parse_layers("0,30", 30)
    assert parse_layers("29,0,-1", 30) == [0, 29]
    with pytest.raises(ModelLoadError, match="not a SpecViz draft"):
        load_offline_draft(pair.target, tmp_path)
    draft = build_draft(pair.target, [0], torch.bfloat16)
    save_draft(draft, tmp_path, [0], "default")
    for bad in ('{"vocab_ids": [1, 1]}', '{"vocab_ids": [0, 99999999]}', "not json", '{"vocab_ids": []}'):
        (tmp_path / VOCAB_FILE).write_text(bad)
        with pytest.raises(ModelLoadError, match="vocab"):
            load_offline_draft(pair.target, tmp_path)


def test_draft_vocabulary_recipe(pair):
    from specviz.draft.vocab import build_vocab, vocab_coverage

    answers = [{"prompt_ids": [1, 5000, 30000], "answer_ids": [40000, 2, 40000]}]
    ids = build_vocab(pair.tokenizer, answers, seed=0, bpe_rows=100, text_rows=0)
    assert ids == sorted(set(range(100)) | {5000, 30000, 40000} | set(pair.tokenizer.all_special_ids))
    heldout = [{"prompt_ids": [45000], "answer_ids": [3, 40000, 45000, 46000]}]
    assert vocab_coverage(ids, heldout) == {"heldout_tokens": 4, "coverage": 0.5, "coverage_with_prompt": 0.75}


def test_the_offline_default_takes_the_draft_that_pays_more(tmp_path, monkeypatch):
    """With a recorded draft-eval on both shipped drafts, the default is the one whose one-level speedup
    (1 + agreement) / (1 + level cost) is higher, so a cheap draft with lower agreement can win; without
    records it is the higher held-out agreement; a damaged metrics.json never picks a draft blindly."""
    import json

    from specviz.engine import models

    feature, independent = tmp_path / "feature", tmp_path / "independent"
    feature.mkdir()
    independent.mkdir()
    monkeypatch.setattr(models, "offline_feature_draft_dir", lambda: feature)
    monkeypatch.setattr(models, "offline_default_draft_dir", lambda: independent)

    def write(folder, agreement, record=None):
        data = {"heldout_agreement": {"depth1": agreement} if folder == feature else agreement}
        if record:
            data["draft_eval"] = {"agreement": record[0], "level_cost": record[1]}
        (folder / "metrics.json").write_text(json.dumps(data))

    write(feature, 0.32)
    write(independent, 0.364)
    assert models.offline_default_drafts_dir() == independent          # agreement alone
    write(feature, 0.32, (0.32, 0.041))                                 # 1.32 / 1.041 = 1.268
    assert models.offline_default_drafts_dir() == independent          # one side unrecorded: agreement
    write(independent, 0.364, (0.367, 0.147))                          # 1.367 / 1.147 = 1.192
    assert models.offline_default_drafts_dir() == feature
    write(independent, 0.364, (0.60, 0.147))                           # 1.6 / 1.147 = 1.395
    assert models.offline_default_drafts_dir() == independent
    (feature / "metrics.json").write_text("{not json")
    assert models.offline_default_drafts_dir() == independent
    monkeypatch.setattr(models, "offline_default_draft_dir", lambda: None)
    assert models.offline_default_drafts_dir() == feature               # the only one shipped


def test_the_shipped_records_make_the_feature_draft_the_default():
    """Both shipped drafts carry a draft-eval record, and by them the feature draft pays more per step
    (1.266 against 1.206 when recorded); a retrained draft must be re-evaluated (`draft-eval --record`)."""
    from specviz.engine import models

    feature, independent = models.offline_feature_draft_dir(), models.offline_default_draft_dir()
    speeds = [models.one_level_speedup(d / "metrics.json") for d in (feature, independent)]
    assert None not in speeds, "run `python -m specviz draft-eval --draft feature|independent --record`"
    assert speeds[0] > speeds[1]
    assert models.offline_default_drafts_dir() == feature


def test_sampled_answers_are_drawn_on_the_targets_device_and_follow_the_seed(pair, tmp_path, monkeypatch):
    """`generate_answers` samples with a generator on the target's device (a GPU lease samples there instead of
    copying every token's 49k probabilities to the host): the same seed writes the same answers, another seed
    other ones, and the greedy held-out answers do not depend on it."""
    from specviz.draft import data

    prompts = {"heldout": [{"prompt": SAMPLE[0]}], "train": [{"prompt": SAMPLE[3], "category": "chat"},
                                                             {"prompt": SAMPLE[4], "category": "chat"}]}
    monkeypatch.setattr(data, "load_prompts", lambda split: prompts[split])
    devices = []
    real_generate = data.generate_batch

    def recording_generate(target, tokenizer, prompt_ids, n_new, temperature, generator):
        devices.append((generator.device, target.device))
        return real_generate(target, tokenizer, prompt_ids, n_new, temperature, generator)

    monkeypatch.setattr(data, "generate_batch", recording_generate)
    written = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        out = tmp_path / name
        out.mkdir()
        data.generate_answers(pair.target, pair.tokenizer, out, seed, batch=2, max_new_tokens=12,
                              heldout_tokens=6, temperatures=(0.9,))
        written[name] = ([r["answer_ids"] for r in data.read_jsonl(out / "answers.jsonl")],
                         [r["answer_ids"] for r in data.read_jsonl(out / "heldout.jsonl")])
    assert all(g == t for g, t in devices) and devices
    assert written["a"] == written["b"]
    assert written["a"][0] != written["c"][0]           # sampled: the seed matters
    assert written["a"][1] == written["c"][1]           # greedy held-out answers: it does not
    assert all(0 < len(a) <= 12 for a in written["a"][0])


def test_the_composed_training_prompts_are_reproducible_and_never_benchmark_prompts(tmp_path, monkeypatch):
    """assets/prompts/distill-more.jsonl and distill-extra.jsonl are what scripts/make_distill_prompts.py writes
    (so they can be regrown, not hand-edited), `distill` trains on them beside distill.jsonl, and none of them
    is a benchmark or held-out prompt, or repeats another train prompt: the benchmark measures the draft on
    prompts it never saw."""
    import importlib.util

    from specviz.draft.data import PROMPTS_FILES
    from specviz.draft.featuretrain import suite_prompts
    from specviz.paths import assets_dir

    spec = importlib.util.spec_from_file_location("make_prompts", assets_dir().parent / "scripts" /
                                                  "make_distill_prompts.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "OUT", tmp_path / "distill-more.jsonl")
    monkeypatch.setattr(script, "OUT_EXTRA", tmp_path / "distill-extra.jsonl")
    script.main()
    train = [p["prompt"] for p in load_prompts("train")]
    assert len(set(train)) == len(train)   # distill.jsonl, distill-more and distill-extra share no prompt
    assert not set(train) & {p["prompt"] for p in load_prompts("heldout")}
    for name, at_least in (("distill-more.jsonl", 600), ("distill-extra.jsonl", 900)):
        shipped = assets_dir() / "prompts" / name
        assert shipped in PROMPTS_FILES and (tmp_path / name).read_text() == shipped.read_text()
        composed = [json.loads(line)["prompt"] for line in shipped.read_text().splitlines()]
        assert len(composed) >= at_least and set(composed) <= set(train)
        assert not set(composed) & suite_prompts()   # (distill leaves out answers to the few of distill.jsonl that are)

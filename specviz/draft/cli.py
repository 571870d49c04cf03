"""The draft's commands: `distill`, `draft-vocab`, `draft-eval`.

`register(subparsers)` is called from `specviz.cli.build_parser`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from ..errors import InvalidInput
from ..paths import write_json
from .data import (
    PROMPTS_FILES,
    chat_ids,
    generate_answers,
    generate_batch,
    load_prompts,
    log,
)
from .evaluate import agreement, heldout_sequences
from .train import train
from .vocab import write_vocab

DEFAULT_LAYERS = "0,10,20,29"


def _load_target(target_name: str, device: str | None):
    from ..engine.models import choose_device, load_model, load_tokenizer

    dev = choose_device(device)
    tokenizer = load_tokenizer(target_name)
    # The teacher runs in bf16 (fp16 on GPUs without bf16 would overflow less gracefully; bf16 is the norm).
    return load_model(target_name, dev, torch.bfloat16), tokenizer


# Settings of either kind that are the arguments of the same name, recorded in settings.json.
RUN_ARGS = ("steps", "batch", "seq_len", "lr", "warmup", "seed", "answer_rows", "chat_wrap", "save_every",
            "log_every", "gen_batch", "gen_tokens", "heldout_tokens")
FEATURE_ARGS = ("feature_batches", "feature_shards", "online_features", "minutes", "unroll", "noise", "ce_weight")


def cmd_distill(args: argparse.Namespace) -> int:
    from ..engine.models import is_default
    from ..paths import cache_dir
    from .pruned import parse_layers

    started = time.perf_counter()   # --minutes counts from here: loading and answering are part of the lease
    if args.threads:
        torch.set_num_threads(args.threads)
    for name in ("steps", "batch", "seq_len", "save_every"):
        if getattr(args, name) <= 0:
            raise InvalidInput(f"--{name.replace('_', '-')} must be positive")
    target, tokenizer = _load_target(args.target, args.device)
    key = "default" if is_default(args.target) else Path(args.target).name
    if args.kind == "feature":
        kind = _feature_settings(args, target)   # its mistakes are refused before anything is written
        work_name = f"feature-{key}"
    else:
        layers = parse_layers(args.layers, target.config.num_hidden_layers)
        kind = {"layers": layers, "loss": "KL(target || draft), temperature 1, full vocabulary"}
        work_name = f"{key}-{'_'.join(map(str, layers))}"
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(args.work) if args.work else cache_dir() / "distill" / work_name
    work_dir.mkdir(parents=True, exist_ok=True)
    settings = {"target": "default" if is_default(args.target) else args.target,
                **{name: getattr(args, name) for name in RUN_ARGS}, **kind,
                "device": str(target.device), "threads": torch.get_num_threads(), "work_dir": str(work_dir),
                "prompts": [str(p.relative_to(p.parent.parent.parent)) for p in PROMPTS_FILES if p.exists()]}
    draft = "feature draft" if args.kind == "feature" else f"draft = target layers {settings['layers']}"
    log(f"{draft} for {settings['target']} on {target.device}; work dir {work_dir}")
    generate_answers(target, tokenizer, work_dir, args.seed, args.gen_batch, args.gen_tokens, args.heldout_tokens,
                     tuple(settings.get("answer_temperatures", (0.0, 0.7))))
    if args.answers_only:
        # A GPU lease is too short to spend on answers: make them on a CPU first, carry the work dir's files.
        log(f"answers in {work_dir / 'answers.jsonl'} and {work_dir / 'heldout.jsonl'}; --answers-only: no training")
        return 0
    if args.kind == "feature":
        _train_feature(args, target, tokenizer, settings, out_dir, work_dir, started)
        return 0
    train(target, tokenizer, settings, out_dir, work_dir, resume=args.resume)
    if args.vocab_rows:
        write_vocab(tokenizer, work_dir, out_dir, args.seed, args.vocab_rows, args.vocab_text_rows)
    return 0


def _feature_settings(args: argparse.Namespace, target) -> dict:
    """What settings.json records of a feature draft's run, its arguments checked."""
    from ..engine.models import OFFLINE_DRAFT_DIR
    from .feature import is_feature_draft_dir

    if args.init_from and args.resume:
        raise InvalidInput("--init-from starts a new run from a shipped draft; --resume continues the work dir's "
                           "run: choose one")
    if args.init_from and not is_feature_draft_dir(args.init_from):
        raise InvalidInput(f"--init-from {args.init_from}: not a feature-draft directory")
    shipped = json.loads((Path(args.init_from) / "feature.json").read_text()) if args.init_from else {}
    taps, shipped_taps = _feature_taps(args, target.config.num_hidden_layers, tuple(shipped.get("taps", ())))
    layers, shipped_layers = _feature_layers(args, shipped.get("layers", 1))
    # Taps that start at zero weight need a higher rate to catch up; trained ones continue at the base rate.
    taps_lr_scale = args.taps_lr_scale if args.taps_lr_scale is not None else (
        10.0 if taps and taps != shipped_taps else 1.0)
    return {"kind": "feature", **{name: getattr(args, name) for name in FEATURE_ARGS},
            "unroll_weights": [1.0, 0.8, 0.64, 0.5][:args.unroll], "taps": list(taps),
            "taps_lr_scale": taps_lr_scale, "layers": layers,
            "new_layers_lr_scale": (args.new_layers_lr_scale if args.new_layers_lr_scale is not None else
                                    (3.0 if layers > shipped_layers else 1.0)),
            "vocab_from": str(args.vocab_from or OFFLINE_DRAFT_DIR),
            "loss": "per unrolled step: SmoothL1(f_hat, f) + ce_weight x soft CE vs softmax(head(f)) over the "
                    "head's vocabulary subset; uniform input-feature noise (+-noise x feature RMS)",
            "answer_temperatures": [float(t) for t in args.answer_temperatures.split(",") if t.strip()]}


def _train_feature(args: argparse.Namespace, target, tokenizer, settings: dict, out_dir: Path, work_dir: Path,
                   started: float) -> None:
    from .featuretrain import online_features, precompute, train_feature

    if args.online_features:
        stream = online_features(target, tokenizer, work_dir, settings, args.workers or os.cpu_count() or 1)
    else:
        precompute(target, tokenizer, work_dir, settings)
        stream = None
    train_feature(target, tokenizer, settings, out_dir, work_dir, resume=args.resume, stream=stream,
                  deadline=started + 60 * args.minutes if args.minutes > 0 else None,
                  init_from=Path(args.init_from) if args.init_from else None)


def _feature_layers(args: argparse.Namespace, shipped: int) -> tuple[int, int]:
    """(--feature-layers checked, --init-from's layer count `shipped`). A warm start keeps its draft's layers and
    may add some (they start as the identity), never drop any."""
    layers = shipped if args.feature_layers is None else args.feature_layers
    if not 1 <= layers <= 8:
        raise InvalidInput(f"--feature-layers {layers}: between 1 and 8 (each one costs a draft level a layer)")
    if layers < shipped:
        raise InvalidInput(f"--feature-layers {layers}: {args.init_from} has {shipped} layers; a warm start may "
                           f"add layers, not drop them")
    return layers, shipped


def _feature_taps(args: argparse.Namespace, n_layers: int,
                  shipped: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(--taps checked, --init-from's taps `shipped`). Without --taps a warm start keeps its draft's taps. A warm
    start may add taps to a draft that has none (they start at zero weight), never change the ones it was
    trained with."""
    if args.taps is None:
        return shipped, shipped
    try:
        taps = tuple(sorted({int(t) for t in args.taps.split(",") if t.strip()}))
    except ValueError:
        raise InvalidInput(f"--taps {args.taps!r}: expected comma-separated layer numbers, e.g. 2,14") from None
    if any(not 0 <= t < n_layers - 1 for t in taps):
        raise InvalidInput(f"--taps {args.taps}: layers 0..{n_layers - 2} (the last layer's output is the feature "
                           f"itself)")
    if shipped and taps != shipped:
        raise InvalidInput(f"--taps {args.taps}: {args.init_from} was trained with taps {list(shipped)}")
    return taps, shipped


def cmd_draft_vocab(args: argparse.Namespace) -> int:
    from ..engine.models import load_tokenizer
    from .pruned import is_draft_dir

    work_dir, out_dir = Path(args.work), Path(args.draft)
    if not (work_dir / "answers.jsonl").exists():
        raise InvalidInput(f"{work_dir} holds no answers.jsonl (the work dir of a `distill` run)")
    if not is_draft_dir(out_dir):
        raise InvalidInput(f"{out_dir} is not a SpecViz draft directory")
    print(json.dumps(write_vocab(load_tokenizer(args.target), work_dir, out_dir, args.seed, args.vocab_rows,
                                 args.vocab_text_rows), indent=1))
    return 0


def cmd_draft_eval(args: argparse.Namespace) -> int:
    from ..engine.models import offline_default_draft_dir, offline_feature_draft_dir
    from .feature import is_feature_draft_dir
    from .pruned import is_draft_dir

    if args.threads:
        torch.set_num_threads(args.threads)
    evaluate, draft_dir = _eval_feature, None
    if args.draft in (None, "", "feature") or is_feature_draft_dir(args.draft):
        draft_dir = Path(args.draft) if args.draft not in (None, "", "feature") else offline_feature_draft_dir()
    if draft_dir is None:
        evaluate = _eval_pruned
        draft_dir = Path(args.draft) if args.draft not in (None, "", "independent") else offline_default_draft_dir()
        if draft_dir is None or not is_draft_dir(draft_dir):
            raise InvalidInput(f"no SpecViz draft in {args.draft or 'assets/draft-smollm2-135m'}")
    target, tokenizer = _load_target(args.target, args.device)
    result, agree, level_cost = evaluate(args, draft_dir, target, tokenizer)
    print(json.dumps(result, indent=1))
    if args.record:
        record_eval(draft_dir, agree, level_cost, result)
    return 0


def _eval_pruned(args: argparse.Namespace, draft_dir: Path, target, tokenizer) -> tuple[dict, float, float]:
    """(result, held-out agreement, one draft forward over one target forward)."""
    from ..engine.lean import VocabSubsetHead
    from ..engine.profiler import measure_forward_times
    from .pruned import draft_display_name, load_offline_draft

    draft = load_offline_draft(target, draft_dir)
    rows = heldout_answers(target, tokenizer, args.limit, args.tokens)
    seqs = heldout_sequences(target, rows)
    agree = agreement(draft, seqs)
    times = {"target": measure_forward_times(target, [1], context_len=200, repeats=args.repeats)[1],
             "draft": measure_forward_times(draft, [1], context_len=200, repeats=args.repeats)[1]}
    result = {"draft": draft_display_name(draft_dir), "heldout_prompts": len(seqs),
              "positions": sum(int(s[2].numel()) for s in seqs), "agreement": round(agree, 4),
              "target_ms": round(times["target"], 2), "draft_ms": round(times["draft"], 2),
              "draft_over_target": round(times["draft"] / times["target"], 3),
              "draft_head_rows": int(draft.lm_head.vocab_ids.numel()) if isinstance(draft.lm_head, VocabSubsetHead)
              else len(tokenizer),
              "device": str(target.device), "threads": torch.get_num_threads()}
    return result, result["agreement"], result["draft_over_target"]


def record_eval(draft_dir: Path, agreement: float, level_cost: float, result: dict) -> None:
    """Keep a draft-eval in the draft's metrics.json: the offline default picks its draft from these
    (`engine.models.offline_default_drafts_dir`). Retraining rewrites metrics.json, dropping a stale one."""
    path = Path(draft_dir) / "metrics.json"
    metrics = json.loads(path.read_text()) if path.exists() else {}
    metrics["draft_eval"] = {"agreement": agreement, "level_cost": level_cost, "device": result["device"],
                             "threads": result["threads"], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    write_json(path, metrics)
    print(f"recorded in {path}")


def heldout_answers(target, tokenizer, limit: int | None, tokens: int) -> list[dict]:
    """The target's greedy answers to the held-out prompts (never trained on), 32 at a time."""
    prompts = load_prompts("heldout")[:limit or None]
    rows = []
    for start in range(0, len(prompts), 32):
        ids = [chat_ids(tokenizer, p["prompt"]) for p in prompts[start:start + 32]]
        answers = generate_batch(target, tokenizer, ids, tokens, 0.0, torch.Generator())
        rows += [{"prompt_ids": p, "answer_ids": a, "category": r.get("category")}
                 for p, a, r in zip(ids, answers, prompts[start:start + 32])]
    return rows


def _eval_feature(args: argparse.Namespace, feature_dir: Path, target, tokenizer) -> tuple[dict, float, float]:
    """Held-out top-1 agreement per depth and the cost of one draft level against one target forward
    (the result, and those two figures at depth 1)."""
    from ..engine.profiler import measure_forward_times
    from .feature import load_feature_draft
    from .featuretrain import evaluate_depths, heldout_features

    draft = load_feature_draft(target, feature_dir)
    rows = heldout_answers(target, tokenizer, args.limit, args.tokens)
    feats = heldout_features(target, None, rows, draft.taps)
    # As Sequoia runs the head (widened by the prompt's and the written tokens), and the head's own rows.
    agree = evaluate_depths(draft, feats, 3, widen=True)
    own_rows = evaluate_depths(draft, feats, 3)
    # Per kind of prompt too: prose and code are drafted very differently, and the mean hides which lags.
    kinds = sorted({str(r["category"]) for r in rows})
    by_kind = {k: evaluate_depths(draft, [f for f, r in zip(feats, rows) if str(r["category"]) == k], 3, widen=True)
               for k in kinds}
    sizes = [1, 4, 8, 16]
    t_target = measure_forward_times(target, [1, 16], context_len=200, repeats=args.repeats)
    t_draft = measure_forward_times(draft, sizes, context_len=200, repeats=args.repeats)
    result = {"draft": str(feature_dir), "heldout_prompts": len(rows), "positions": agree["positions"],
              "agreement_by_depth": {k: v for k, v in agree.items() if k != "positions"},
              "agreement_by_depth_head_rows_only": {k: v for k, v in own_rows.items() if k != "positions"},
              "agreement_by_category": {k: {"prompts": sum(str(r["category"]) == k for r in rows), **v}
                                        for k, v in by_kind.items()},
              "target_ms": {str(k): round(v, 2) for k, v in t_target.items()},
              "draft_level_ms": {str(k): round(v, 2) for k, v in t_draft.items()},
              "draft_level_over_target": round(t_draft[1] / t_target[1], 3),
              "draft_level16_over_target": round(t_draft[16] / t_target[1], 3),
              "draft_head_rows": int(draft.vocab_ids.numel()), "dtype": str(target.dtype).replace("torch.", ""),
              "device": str(target.device), "threads": torch.get_num_threads()}
    return result, agree["depth1"], result["draft_level_over_target"]


def _add_vocab_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vocab-rows", type=int, default=12288,
                   help="draft head: keep BPE's first N tokens plus every token seen in the data (0: whole vocabulary)")
    p.add_argument("--vocab-text-rows", type=int, default=150, help="offline text rows scanned for the head's tokens")


def register(subparsers) -> None:
    p = subparsers.add_parser("distill", help="train a small draft for a target by knowledge distillation")
    p.add_argument("--target", default="default", help="target model: 'default' or a Hub id / local directory")
    p.add_argument("--out", required=True, help="directory for the draft checkpoint, metrics.json, settings.json")
    p.add_argument("--work", default=None, help="generated answers + resumable training state "
                                                "(default: under the SpecViz cache)")
    p.add_argument("--kind", choices=("pruned", "feature"), default="pruned",
                   help="pruned: a few target layers, KL-distilled; feature: one layer (--feature-layers) reading the target's "
                        "hidden states (EAGLE style)")
    p.add_argument("--feature-batches", type=int, default=240,
                   help="--kind feature: batches whose target features are computed once and stored")
    p.add_argument("--feature-shards", type=int, default=0, help="--kind feature: train on the first N shards only")
    p.add_argument("--answer-temperatures", default="0,0.7",
                   help="--kind feature: the target answers each train prompt once per temperature")
    p.add_argument("--answers-only", action="store_true",
                   help="generate the target's answers into the work dir (resumable) and stop, e.g. on a CPU "
                        "before a GPU lease (scripts/gpu/gpu_pack.sh --answers carries them)")
    p.add_argument("--online-features", action="store_true",
                   help="--kind feature: run the target inside the training loop instead of storing its features "
                        "(pays off on a GPU); --feature-batches then counts the distinct batches of token ids")
    p.add_argument("--workers", type=int, default=0,
                   help="--online-features: processes that tokenise the batches (0 = one per core)")
    p.add_argument("--minutes", type=float, default=0,
                   help="--kind feature: end the whole command (answers, features, training, checkpoints) within "
                        "this many minutes: the step count follows the recent steps' pace, --steps stays the "
                        "upper bound (for a machine lent for a fixed time)")
    p.add_argument("--unroll", type=int, default=3, help="--kind feature: unrolled steps on the draft's own features")
    p.add_argument("--ce-weight", type=float, default=1.0,
                   help="--kind feature: weight of the soft cross-entropy against the target's distribution "
                        "(EAGLE uses 0.1 on 7B targets; on this 135M target 0.1 left KL at 5.4 nats after 50 steps)")
    p.add_argument("--noise", type=float, default=0.1, help="--kind feature: input-feature noise, x feature RMS")
    p.add_argument("--taps", default=None,
                   help="--kind feature: target layers whose outputs the draft also reads at true positions "
                        "(EAGLE-3's low and mid layers), e.g. 2,14; default: --init-from's, else none")
    p.add_argument("--taps-lr-scale", type=float, default=None,
                   help="--kind feature: the taps' learning rate over --lr (default 10 for taps new to the draft, "
                        "which start at zero weight; 1 for taps it was trained with)")
    p.add_argument("--feature-layers", type=int, default=None,
                   help="--kind feature: decoder layers of the draft (default: --init-from's, else 1); layers added "
                        "to a warm start begin as the identity (zeroed outputs)")
    p.add_argument("--new-layers-lr-scale", type=float, default=None,
                   help="--kind feature: the added layers' learning rate over --lr (default 3 when --feature-layers "
                        "adds layers to --init-from's draft, else 1)")
    p.add_argument("--vocab-from", default=None, help="--kind feature: draft dir whose vocab.json the head uses")
    p.add_argument("--layers", default=DEFAULT_LAYERS, help="target layers the draft starts from, e.g. 0,10,20,29")
    p.add_argument("--steps", type=int, default=240)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=8e-4)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--answer-rows", type=int, default=3, help="rows per batch from the target's own answers")
    p.add_argument("--chat-wrap", type=float, default=0.4, help="share of text rows wrapped in the chat template")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-every", type=int, default=20)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--gen-batch", type=int, default=48)
    p.add_argument("--gen-tokens", type=int, default=256)
    p.add_argument("--heldout-tokens", type=int, default=128)
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0 = torch's default)")
    p.add_argument("--resume", action="store_true", help="continue from the training state in the work dir")
    p.add_argument("--init-from", default=None,
                   help="--kind feature: start from this shipped feature-draft directory's weights (a fresh "
                        "optimiser and schedule; step counts continue from its own)")
    _add_vocab_args(p)
    p.set_defaults(func=cmd_distill)

    p = subparsers.add_parser("draft-vocab", help="(re)build a draft's head vocabulary from a distill work dir")
    p.add_argument("--target", default="default")
    p.add_argument("--work", required=True, help="the distill run's work dir (answers.jsonl, heldout.jsonl)")
    p.add_argument("--draft", required=True, help="the draft directory to write vocab.json into")
    p.add_argument("--seed", type=int, default=0)
    _add_vocab_args(p)
    p.set_defaults(func=cmd_draft_vocab)

    p = subparsers.add_parser("draft-eval", help="held-out agreement and forward time of a distilled draft")
    p.add_argument("--target", default="default")
    p.add_argument("--draft", default=None, help="draft directory (default: the shipped offline draft)")
    p.add_argument("--tokens", type=int, default=128, help="greedy tokens per held-out prompt")
    p.add_argument("--limit", type=int, default=0, help="only the first N held-out prompts")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--record", action="store_true",
                   help="keep the result in the draft's metrics.json (the offline default chooses its draft by it)")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0)
    p.set_defaults(func=cmd_draft_eval)

"""Distilling a small draft from the target: `python -m specviz distill` and `draft-eval`.

Recipe (all seeded, every stage resumable from files in --out):
1. generate: the target answers the train prompts of assets/prompts/distill.jsonl
   (batched, once greedy and once sampled at temperature 0.7) and greedily continues
   the held-out prompts (kept only for measuring agreement, never trained on).
2. train: a layer-pruned copy of the target (`--layers`, its embeddings frozen and
   shared) learns the target's full next-token distribution (KL at temperature 1,
   teacher logits computed on the fly, target in bf16, no grad) on a mix of the
   target's own chat answers and text already on this machine (source and docs of
   installed packages and the stdlib), part of it wrapped in the chat template.
   Checkpoints (draft weights + optimiser + data position) go to --out every
   --save-every steps; `--resume` continues from there.
3. metrics.json / settings.json next to the checkpoint: loss curve and held-out
   greedy top-1 agreement.

Agreement = fraction of positions of the target's own greedy continuation of a
held-out prompt where the draft's argmax equals the target's argmax (both
teacher-forced on the same tokens).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import sysconfig
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from .errors import InvalidInput

PROMPTS_FILE = Path(__file__).resolve().parent.parent / "assets" / "prompts" / "distill.jsonl"
DEFAULT_LAYERS = "0,10,20,29"
# Wrappers that turn a piece of code/docs into an assistant answer, so the draft sees chat-shaped contexts.
CHAT_WRAPPERS = [
    "Show me an example of Python code.", "Can you write some code for this?", "Explain this with some documentation.",
    "Write the module for me.", "Give me an example.", "Write some documentation for this project.",
    "How would you implement this in Python?", "Continue the text.",
]


def log(msg: str) -> None:
    print(f"[distill {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load_prompts(split: str, path: Path = PROMPTS_FILE) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("split", "train") == split]


def chat_ids(tokenizer, prompt: str) -> list[int]:
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# ---------------------------------------------------------------------------
# Stage 1: the target's own answers
# ---------------------------------------------------------------------------


@torch.inference_mode()
def generate_batch(target, tokenizer, prompt_ids: list[list[int]], max_new_tokens: int, temperature: float,
                   generator: torch.Generator) -> list[list[int]]:
    """Batched sampling (left padded); returns each row's new tokens up to and including EOS."""
    device = target.device
    eos = tokenizer.eos_token_id
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), width), eos, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompt_ids):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = target(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    cache = out.past_key_values
    logits = out.logits[:, -1].float()
    finished = torch.zeros(len(prompt_ids), dtype=torch.bool, device=device)
    new_tokens = []
    for _ in range(max_new_tokens):
        if temperature == 0:
            tok = logits.argmax(-1)
        else:
            probs = torch.softmax(logits / temperature, -1)
            tok = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(device)
        tok = torch.where(finished, torch.full_like(tok, eos), tok)
        new_tokens.append(tok)
        finished |= tok == eos
        if bool(finished.all()):
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
        positions = positions[:, -1:] + 1
        out = target(input_ids=tok[:, None], attention_mask=mask, position_ids=positions, past_key_values=cache,
                     use_cache=True)
        logits = out.logits[:, -1].float()
    rows = torch.stack(new_tokens, 1).tolist()
    result = []
    for row in rows:
        result.append(row[:row.index(eos) + 1] if eos in row else row)
    return result


def generate_answers(target, tokenizer, out_dir: Path, seed: int, batch: int, max_new_tokens: int,
                     heldout_tokens: int) -> None:
    """Write answers.jsonl (train prompts) and heldout.jsonl (held-out greedy continuations); resumable."""
    jobs = [("heldout.jsonl", load_prompts("heldout"), 0.0, heldout_tokens)]
    train = load_prompts("train")
    jobs += [("answers.jsonl", train, 0.0, max_new_tokens), ("answers.jsonl", train, 0.7, max_new_tokens)]
    generator = torch.Generator().manual_seed(seed)
    for fname, prompts, temperature, n_new in jobs:
        path = out_dir / fname
        done = set()
        if path.exists():
            done = {(r["prompt"], r["temperature"]) for r in map(json.loads, path.read_text().splitlines())}
        todo = [p for p in prompts if (p["prompt"], temperature) not in done]
        if not todo:
            continue
        log(f"generating {len(todo)} answers (T={temperature}, {n_new} tokens) -> {path.name}")
        # Similar prompt lengths per batch waste less padding.
        todo.sort(key=lambda p: len(p["prompt"]))
        for start in range(0, len(todo), batch):
            rows = todo[start:start + batch]
            prompt_ids = [chat_ids(tokenizer, r["prompt"]) for r in rows]
            t0 = time.perf_counter()
            answers = generate_batch(target, tokenizer, prompt_ids, n_new, temperature, generator)
            n_tok = sum(len(a) for a in answers)
            with open(path, "a") as fh:
                for r, p, a in zip(rows, prompt_ids, answers):
                    fh.write(json.dumps({"prompt": r["prompt"], "category": r.get("category"),
                                         "temperature": temperature, "prompt_ids": p, "answer_ids": a}) + "\n")
            log(f"  {start + len(rows)}/{len(todo)}: {n_tok} tokens, {n_tok / (time.perf_counter() - t0):.0f} tok/s")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


# ---------------------------------------------------------------------------
# Stage 2: training data. Batch k is a pure function of (seed, k), so a resumed
# run sees exactly the batches an uninterrupted one would have seen.
# ---------------------------------------------------------------------------


def text_files(seed: int) -> tuple[list[Path], list[Path]]:
    """(documentation files, source files) shipped with installed packages and the stdlib, in a seeded order."""
    roots = sorted({Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["stdlib"])})
    docs, code = [], []
    for root in roots:
        for path in root.rglob("*"):
            suffix = path.suffix
            if suffix not in (".py", ".md", ".rst", ".txt") or "test" in path.name:
                continue
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if 2_000 <= size <= 400_000 and path.is_file():
                (code if suffix == ".py" else docs).append(path)
    docs.sort()
    code.sort()
    random.Random(seed).shuffle(docs)
    random.Random(seed + 1).shuffle(code)
    return docs, code


class DistillData:
    """Rows of `seq_len` tokens: the target's own chat answers and (partly chat-wrapped) offline text.

    Rows are packed without document masks: teacher and draft see exactly the same context, so the
    distillation target stays consistent wherever a document boundary falls.
    """

    def __init__(self, tokenizer, answers: list[dict], seed: int, seq_len: int, batch: int,
                 answer_rows: int, chat_wrap: float, doc_share: float = 0.35):
        self.tokenizer, self.seed, self.seq_len, self.batch = tokenizer, seed, seq_len, batch
        self.answer_rows, self.chat_wrap, self.doc_share = answer_rows, chat_wrap, doc_share
        order = list(range(len(answers)))
        random.Random(seed).shuffle(order)
        self.answer_stream = [t for i in order for t in answers[i]["prompt_ids"] + answers[i]["answer_ids"]]
        self.docs, self.code = text_files(seed)
        if not self.docs and not self.code:
            raise InvalidInput("found no offline text (.py/.md/.rst) to distill on")
        self.wrap_ids = [chat_ids(tokenizer, w) for w in CHAT_WRAPPERS]

    def _answer_row(self, rng: random.Random) -> list[int]:
        start = rng.randrange(max(1, len(self.answer_stream) - self.seq_len))
        row = self.answer_stream[start:start + self.seq_len]
        return row if len(row) == self.seq_len else self._text_row(rng)

    def _file_tokens(self, rng: random.Random, n_tokens: int) -> list[int]:
        files = self.docs if (self.docs and (rng.random() < self.doc_share or not self.code)) else self.code
        path = files[rng.randrange(len(files))]
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return []
        start = rng.randrange(max(1, len(text) - 6 * n_tokens)) if rng.random() < 0.7 else 0
        start = text.rfind("\n", 0, start) + 1  # begin at a line start
        return self.tokenizer(text[start:start + 6 * n_tokens], add_special_tokens=False)["input_ids"]

    def _text_row(self, rng: random.Random) -> list[int]:
        row = list(self.wrap_ids[rng.randrange(len(self.wrap_ids))]) if rng.random() < self.chat_wrap else []
        while len(row) < self.seq_len:
            row += self._file_tokens(rng, self.seq_len - len(row))
            if len(row) < self.seq_len:
                row.append(self.tokenizer.eos_token_id)
        return row[:self.seq_len]

    def batch_at(self, step: int) -> torch.Tensor:
        rng = random.Random(self.seed * 1_000_003 + step)
        n_answer = min(self.answer_rows, self.batch) if self.answer_stream else 0
        rows = [self._answer_row(rng) for _ in range(n_answer)]
        rows += [self._text_row(rng) for _ in range(self.batch - n_answer)]
        return torch.tensor(rows, dtype=torch.long)


# ---------------------------------------------------------------------------
# Stage 2b: the draft head's vocabulary
# ---------------------------------------------------------------------------


def build_vocab(tokenizer, answers: list[dict], seed: int, bpe_rows: int, text_rows: int,
                seq_len: int = 256) -> list[int]:
    """Token ids the draft's head keeps: BPE's first `bpe_rows` merges plus every token seen written.

    BPE numbers tokens roughly by frequency in the tokenizer's own corpus, so low ids
    cover common text; the target's own answers and a sample of the offline text add
    the tokens this target actually writes. Sequoia widens the set with each prompt's
    tokens at run time (answers quote their prompt).
    """
    seen = {t for a in answers for t in a["answer_ids"] + a["prompt_ids"]}
    if text_rows > 0:
        data = DistillData(tokenizer, [], seed, seq_len, 1, 0, 0.0)
        rng = random.Random(seed + 7)
        for _ in range(text_rows):
            seen.update(data._text_row(rng))
    vocab = len(tokenizer)
    ids = set(range(min(bpe_rows, vocab))) | {t for t in seen if 0 <= t < vocab} | set(tokenizer.all_special_ids)
    return sorted(ids)


def vocab_coverage(vocab_ids: list[int], heldout: list[dict]) -> dict:
    """Share of the target's held-out greedy tokens the head can propose (alone / with the prompt's tokens)."""
    keep = set(vocab_ids)
    total = alone = widened = 0
    for row in heldout:
        prompt = set(row["prompt_ids"])
        for t in row["answer_ids"]:
            total += 1
            alone += t in keep
            widened += t in keep or t in prompt
    return {"heldout_tokens": total, "coverage": round(alone / max(total, 1), 4),
            "coverage_with_prompt": round(widened / max(total, 1), 4)}


def write_vocab(tokenizer, work_dir: Path, out_dir: Path, seed: int, bpe_rows: int, text_rows: int) -> dict:
    from .draft import save_vocab

    ids = build_vocab(tokenizer, read_jsonl(work_dir / "answers.jsonl"), seed, bpe_rows, text_rows)
    info = {"rows": len(ids), "bpe_rows": bpe_rows, "text_rows": text_rows, "seed": seed,
            **vocab_coverage(ids, read_jsonl(work_dir / "heldout.jsonl"))}
    save_vocab(out_dir, ids, info)
    log(f"draft head: {len(ids)} of {len(tokenizer)} tokens, held-out coverage {info['coverage']:.3f} "
        f"({info['coverage_with_prompt']:.3f} with the prompt's tokens)")
    return info


# ---------------------------------------------------------------------------
# Stage 3: loss, agreement, training loop
# ---------------------------------------------------------------------------


def kl_to_teacher(draft_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Mean over positions of KL(teacher || draft) at temperature 1, in fp32."""
    t_logp = F.log_softmax(teacher_logits.float(), -1)
    d_logp = F.log_softmax(draft_logits.float(), -1)
    return (t_logp.exp() * (t_logp - d_logp)).sum(-1).mean()


@torch.inference_mode()
def heldout_sequences(target, heldout: list[dict]) -> list[tuple[torch.Tensor, int, torch.Tensor]]:
    """(ids, prompt length, target argmax at the continuation's positions) per held-out prompt."""
    seqs = []
    for r in heldout:
        ids = torch.tensor([r["prompt_ids"] + r["answer_ids"]], device=target.device)
        n_prompt = len(r["prompt_ids"])
        logits = target(input_ids=ids).logits[0, n_prompt - 1:-1]
        seqs.append((ids, n_prompt, logits.argmax(-1)))
    return seqs


@torch.inference_mode()
def agreement(draft, seqs) -> float:
    """Greedy top-1 agreement of the draft with the target along the target's greedy continuations."""
    hits = total = 0
    for ids, n_prompt, target_top1 in seqs:
        with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=_autocast(draft)):
            logits = draft(input_ids=ids).logits[0, n_prompt - 1:-1]
        hits += int((logits.argmax(-1) == target_top1).sum())
        total += target_top1.numel()
    return hits / max(total, 1)


def _autocast(draft) -> bool:
    return any(p.dtype == torch.float32 for p in draft.parameters() if p.requires_grad)


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _own_params(draft) -> dict[str, torch.nn.Parameter]:
    from .draft import SHARED_PREFIXES

    return {n: p for n, p in draft.named_parameters() if not n.startswith(SHARED_PREFIXES)}


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def train(target, tokenizer, settings: dict, out_dir: Path, work_dir: Path, resume: bool) -> dict:
    from .draft import build_draft, save_draft

    device = target.device
    torch.manual_seed(settings["seed"])
    layers = settings["layers"]
    draft = build_draft(target, layers, torch.float32)
    params = _own_params(draft)
    for p in params.values():
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params.values(), lr=settings["lr"], betas=(0.9, 0.95), weight_decay=0.0)
    metrics = {"loss": [], "agreement": [], "tokens_seen": 0}
    start = 0
    state_path = work_dir / "train_state.pt"
    if resume and state_path.exists():
        state = torch.load(state_path, map_location=device, weights_only=False)
        if state["settings"]["layers"] != layers:
            raise InvalidInput(f"--resume: the checkpoint in {work_dir} has layers {state['settings']['layers']}")
        with torch.no_grad():
            for name, tensor in state["draft"].items():
                params[name].copy_(tensor)
        optimizer.load_state_dict(state["optimizer"])
        start, metrics = state["step"], state["metrics"]
        # Settings may change on resume (steps, data mix): keep each phase's settings for reproducing it.
        previous = {k: v for k, v in state["settings"].items() if k != "history"}
        settings["history"] = state["settings"].get("history", []) + [{**previous, "until_step": start}]
        log(f"resumed at step {start}")

    answers = read_jsonl(work_dir / "answers.jsonl")
    data = DistillData(tokenizer, answers, settings["seed"], settings["seq_len"], settings["batch"],
                       settings["answer_rows"], settings["chat_wrap"])
    log(f"data: {len(data.answer_stream)} answer tokens, {len(data.docs)} doc files, {len(data.code)} source files")
    seqs = heldout_sequences(target, read_jsonl(work_dir / "heldout.jsonl"))
    if start == 0:
        draft.eval()
        metrics["agreement"].append([0, agreement(draft, seqs)])
        log(f"step 0: held-out agreement {metrics['agreement'][-1][1]:.3f}")

    def checkpoint(step: int) -> None:
        draft.eval()
        metrics["agreement"].append([step, agreement(draft, seqs)])
        own = {n: p.detach().clone() for n, p in params.items()}
        torch.save({"draft": own, "optimizer": optimizer.state_dict(), "step": step, "metrics": metrics,
                    "settings": settings}, work_dir / "train_state.pt.tmp")
        (work_dir / "train_state.pt.tmp").replace(state_path)
        final = {"steps_done": step, "heldout_agreement": metrics["agreement"][-1][1],
                 "heldout_prompts": len(seqs), "heldout_positions": sum(int(s[2].numel()) for s in seqs)}
        save_draft(draft, out_dir, layers, settings["target"], extra={"steps_done": step})
        _write_json(out_dir / "metrics.json", {**final, **metrics})
        _write_json(out_dir / "settings.json", settings)
        log(f"step {step}: held-out agreement {final['heldout_agreement']:.3f}; checkpoint in {out_dir}")

    steps, t_start = settings["steps"], time.perf_counter()
    for step in range(start, steps):
        draft.train()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, steps, settings["lr"], settings["warmup"])
        ids = data.batch_at(step).to(device)
        with torch.no_grad():  # not inference_mode: the teacher's logits are saved for the backward
            teacher_logits = target(input_ids=ids).logits
        with torch.autocast(device.type, dtype=torch.bfloat16):
            draft_logits = draft(input_ids=ids).logits
        loss = kl_to_teacher(draft_logits, teacher_logits)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        optimizer.step()
        metrics["loss"].append([step + 1, round(float(loss.detach()), 4)])
        metrics["tokens_seen"] += ids.numel()
        done = step + 1 - start
        per_step = (time.perf_counter() - t_start) / done
        if done == 1 or (step + 1) % settings["log_every"] == 0:
            log(f"step {step + 1}/{steps} loss {float(loss.detach()):.3f} lr {optimizer.param_groups[0]['lr']:.1e} "
                f"{ids.numel() / per_step:.0f} tok/s, eta {per_step * (steps - step - 1) / 60:.1f} min")
        if (step + 1) % settings["save_every"] == 0 or step + 1 == steps:
            checkpoint(step + 1)
    return metrics


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------


def _load_target(target_name: str, device: str | None):
    from .models import choose_device, load_model, load_tokenizer

    dev = choose_device(device)
    # The teacher runs in bf16 (fp16 on GPUs without bf16 would overflow less gracefully; bf16 is the norm).
    tokenizer = load_tokenizer(target_name)
    target = load_model(target_name, dev, torch.bfloat16)
    return target, tokenizer


def cmd_distill(args: argparse.Namespace) -> int:
    from .draft import parse_layers
    from .models import cache_dir, is_default

    if args.threads:
        torch.set_num_threads(args.threads)
    for name in ("steps", "batch", "seq_len", "save_every"):
        if getattr(args, name) <= 0:
            raise InvalidInput(f"--{name.replace('_', '-')} must be positive")
    target, tokenizer = _load_target(args.target, args.device)
    layers = parse_layers(args.layers, target.config.num_hidden_layers)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    key = "default" if is_default(args.target) else Path(args.target).name
    work_dir = Path(args.work) if args.work else cache_dir() / "distill" / f"{key}-{'_'.join(map(str, layers))}"
    work_dir.mkdir(parents=True, exist_ok=True)
    settings = {"target": "default" if is_default(args.target) else args.target, "layers": layers,
                "steps": args.steps, "batch": args.batch, "seq_len": args.seq_len, "lr": args.lr,
                "warmup": args.warmup, "seed": args.seed, "answer_rows": args.answer_rows,
                "chat_wrap": args.chat_wrap, "save_every": args.save_every, "log_every": args.log_every,
                "gen_batch": args.gen_batch, "gen_tokens": args.gen_tokens, "heldout_tokens": args.heldout_tokens,
                "loss": "KL(target || draft), temperature 1, full vocabulary",
                "device": str(target.device), "threads": torch.get_num_threads(), "work_dir": str(work_dir),
                "prompts": str(PROMPTS_FILE.relative_to(PROMPTS_FILE.parent.parent.parent))}
    log(f"target {settings['target']} on {target.device}, draft = target layers {layers}; work dir {work_dir}")
    generate_answers(target, tokenizer, work_dir, args.seed, args.gen_batch, args.gen_tokens, args.heldout_tokens)
    train(target, tokenizer, settings, out_dir, work_dir, resume=args.resume)
    if args.vocab_rows:
        write_vocab(tokenizer, work_dir, out_dir, args.seed, args.vocab_rows, args.vocab_text_rows)
    return 0


def cmd_draft_vocab(args: argparse.Namespace) -> int:
    from .draft import is_draft_dir
    from .models import load_tokenizer

    work_dir, out_dir = Path(args.work), Path(args.draft)
    if not (work_dir / "answers.jsonl").exists():
        raise InvalidInput(f"{work_dir} holds no answers.jsonl (the work dir of a `distill` run)")
    if not is_draft_dir(out_dir):
        raise InvalidInput(f"{out_dir} is not a SpecViz draft directory")
    print(json.dumps(write_vocab(load_tokenizer(args.target), work_dir, out_dir, args.seed, args.vocab_rows,
                                 args.vocab_text_rows), indent=1))
    return 0


def cmd_draft_eval(args: argparse.Namespace) -> int:
    from .draft import draft_display_name, is_draft_dir, load_offline_draft
    from .lean import VocabSubsetHead
    from .models import offline_default_draft_dir
    from .profiler import measure_forward_times

    if args.threads:
        torch.set_num_threads(args.threads)
    draft_dir = Path(args.draft) if args.draft else offline_default_draft_dir()
    if draft_dir is None or not is_draft_dir(draft_dir):
        raise InvalidInput(f"no SpecViz draft in {args.draft or 'assets/draft-smollm2-135m'}")
    target, tokenizer = _load_target(args.target, args.device)
    draft = load_offline_draft(target, draft_dir)
    prompts = load_prompts("heldout")[:args.limit or None]
    rows = []
    for start in range(0, len(prompts), 32):
        chunk = prompts[start:start + 32]
        ids = [chat_ids(tokenizer, p["prompt"]) for p in chunk]
        answers = generate_batch(target, tokenizer, ids, args.tokens, 0.0, torch.Generator())
        rows += [{"prompt_ids": p, "answer_ids": a} for p, a in zip(ids, answers)]
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
    print(json.dumps(result, indent=1))
    return 0


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
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0)
    p.set_defaults(func=cmd_draft_eval)

"""Distillation data: the target's own answers, offline text, and the batches built from them.

1. `generate_answers`: the target answers the train prompts of
   assets/prompts/distill*.jsonl (batched, once per answer temperature) and
   greedily continues the held-out prompts of distill.jsonl (kept only for
   measuring agreement, never trained on). Resumable: finished prompts are skipped.
2. `DistillData`: rows mixing those answers with text already on this machine
   (source and docs of installed packages and the stdlib), part of it wrapped in
   the chat template. Batch k is a pure function of (seed, k), so a resumed run
   sees exactly the batches an uninterrupted one would have seen.
"""

from __future__ import annotations

import json
import math
import random
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch

from ..engine.lean import attention_kernels
from ..errors import InvalidInput
from ..paths import assets_dir

PROMPTS_FILE = assets_dir() / "prompts" / "distill.jsonl"
# The hand-written prompts above plus the composed ones of scripts/make_distill_prompts.py (distill-more, then
# distill-extra with other kinds of request): a draft trained on 166 prompts agreed with the target on 0.50 of
# its train answers' tokens and 0.36 of held-out ones.
PROMPTS_FILES = (PROMPTS_FILE, PROMPTS_FILE.with_name("distill-more.jsonl"),
                 PROMPTS_FILE.with_name("distill-extra.jsonl"))
# Wrappers that turn a piece of code/docs into an assistant answer, so the draft sees chat-shaped contexts.
CHAT_WRAPPERS = [
    "Show me an example of Python code.", "Can you write some code for this?", "Explain this with some documentation.",
    "Write the module for me.", "Give me an example.", "Write some documentation for this project.",
    "How would you implement this in Python?", "Continue the text.",
]


def log(msg: str) -> None:
    print(f"[distill {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load_prompts(split: str) -> list[dict]:
    rows = [json.loads(line) for path in PROMPTS_FILES if path.exists() for line in path.read_text().splitlines()
            if line.strip()]
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
            # Sampled where the generator lives: on a GPU the batch's 49k-token rows stay there instead of going
            # to the host every token (an H200 sampled 3,540 answers of up to 256 tokens in 53 s).
            tok = torch.multinomial(probs.to(generator.device), 1, generator=generator).squeeze(1).to(device)
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
    return [row[:row.index(eos) + 1] if eos in row else row for row in torch.stack(new_tokens, 1).tolist()]


def generate_answers(target, tokenizer, out_dir: Path, seed: int, batch: int, max_new_tokens: int,
                     heldout_tokens: int, temperatures: tuple[float, ...] = (0.0, 0.7)) -> None:
    """Write answers.jsonl (train prompts, once per temperature) and heldout.jsonl (held-out greedy
    continuations); resumable."""
    jobs = [("heldout.jsonl", load_prompts("heldout"), 0.0, heldout_tokens)]
    train = load_prompts("train")
    jobs += [("answers.jsonl", train, float(t), max_new_tokens) for t in temperatures]
    generator = torch.Generator(device=target.device).manual_seed(seed)
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
            with attention_kernels(target.device):   # the key length grows every step: no cuDNN plans
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

    def batches(self, start: int, stop: int) -> np.ndarray:
        """Batches start..stop-1 as one int32 array (stop-start, batch, seq_len): cheap to send between processes."""
        return np.stack([self.batch_at(k).numpy().astype(np.int32) for k in range(start, stop)])


def batches_in_parallel(data: DistillData, n_batches: int, workers: int) -> torch.Tensor:
    """Batches 0..n_batches-1 of `data` (n_batches, batch, seq_len), tokenised by `workers` processes.

    Each batch is a pure function of (seed, k), so the result equals the sequential one; only the
    tokenising (the slow part on a machine whose GPU waits for it) is spread over processes.
    """
    if workers <= 1 or n_batches < 2 * workers:
        return torch.from_numpy(data.batches(0, n_batches)).long()
    import multiprocessing

    chunk = max(1, math.ceil(n_batches / (4 * workers)))
    ranges = [(k, min(k + chunk, n_batches)) for k in range(0, n_batches, chunk)]
    # fork: the workers inherit `data` (its file list and tokenizer) instead of each rebuilding it.
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        parts = pool.starmap(data.batches, ranges)
    return torch.from_numpy(np.concatenate(parts)).long()

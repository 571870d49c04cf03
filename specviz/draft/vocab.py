"""The draft head's vocabulary: which token ids a draft's output head keeps.

BPE's first rows (BPE numbers tokens roughly by frequency) plus every token seen
in the distillation data; Sequoia adds each prompt's tokens at run time. Stored
as `vocab.json` beside the draft's weights (`specviz.engine.lean.VocabSubsetHead`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from ..errors import ModelLoadError
from .data import DistillData, log, read_jsonl

VOCAB_FILE = "vocab.json"   # optional in a draft directory: the token ids the draft's head keeps


def load_vocab(dir_: str | Path, vocab_size: int) -> torch.Tensor | None:
    path = Path(dir_) / VOCAB_FILE
    if not path.exists():
        return None
    try:
        ids = json.loads(path.read_text())["vocab_ids"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"{path} is not a draft vocabulary file: {exc}") from None
    if not ids or not all(isinstance(t, int) and 0 <= t < vocab_size for t in ids) or len(set(ids)) != len(ids):
        raise ModelLoadError(f"{path} must list distinct token ids below {vocab_size}")
    return torch.tensor(sorted(ids), dtype=torch.long)


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
    ids = build_vocab(tokenizer, read_jsonl(work_dir / "answers.jsonl"), seed, bpe_rows, text_rows)
    info = {"rows": len(ids), "bpe_rows": bpe_rows, "text_rows": text_rows, "seed": seed,
            **vocab_coverage(ids, read_jsonl(work_dir / "heldout.jsonl"))}
    tmp = out_dir / (VOCAB_FILE + ".tmp")
    tmp.write_text(json.dumps({**info, "vocab_ids": ids}))   # compact: 12k ids
    tmp.replace(out_dir / VOCAB_FILE)
    log(f"draft head: {len(ids)} of {len(tokenizer)} tokens, held-out coverage {info['coverage']:.3f} "
        f"({info['coverage_with_prompt']:.3f} with the prompt's tokens)")
    return info

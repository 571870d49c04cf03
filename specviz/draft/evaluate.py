"""Held-out agreement: how often the draft's argmax equals the target's.

Agreement = fraction of positions of the target's own greedy continuation of a
held-out prompt where the draft's argmax equals the target's argmax (both
teacher-forced on the same tokens).
"""

from __future__ import annotations

import torch


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
    trained_in_fp32 = any(p.dtype == torch.float32 for p in draft.parameters() if p.requires_grad)
    for ids, n_prompt, target_top1 in seqs:
        with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=trained_in_fp32):
            logits = draft(input_ids=ids).logits[0, n_prompt - 1:-1]
        hits += int((logits.argmax(-1) == target_top1).sum())
        total += target_top1.numel()
    return hits / max(total, 1)

"""Distilling a layer-pruned draft from the target (the training loop behind `distill`).

The draft (`pruned.build_draft`: a few target layers, embeddings frozen and
shared) learns the target's full next-token distribution: KL at temperature 1,
teacher logits computed on the fly (target in bf16, no grad), on `DistillData`
batches. Checkpoints (draft weights + optimiser + data position) go to the work
dir every `save_every` steps and `--resume` continues from there; metrics.json and
settings.json sit next to the shipped weights.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ..errors import InvalidInput
from ..paths import write_json
from .data import DistillData, log, read_jsonl
from .evaluate import agreement, heldout_sequences
from .pruned import SHARED_PREFIXES, build_draft, save_draft


def kl_to_teacher(draft_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Mean over positions of KL(teacher || draft) at temperature 1, in fp32."""
    t_logp = F.log_softmax(teacher_logits.float(), -1)
    d_logp = F.log_softmax(draft_logits.float(), -1)
    return (t_logp.exp() * (t_logp - d_logp)).sum(-1).mean()


def lr_at(step: int, steps: int, lr: float, warmup: int, floor: float = 0.1) -> float:
    """Linear warmup, then a cosine down to `floor` x lr."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def resumed_history(settings: dict, saved: dict, start: int) -> None:
    """Settings may change on resume (steps, data mix): keep each phase's settings for reproducing it."""
    previous = {k: v for k, v in saved.items() if k != "history"}
    settings["history"] = saved.get("history", []) + [{**previous, "until_step": start}]


def save_state(state: dict, path: Path) -> None:
    """`torch.save` through a temporary file: a crash never leaves half a file for `--resume` to read."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def log_step(step: int, start: int, steps: int, t_start: float, tokens: int, loss: str, lr: float,
             log_every: int) -> None:
    """Step `step` (0-based) done: its loss, the rate since `start` and the time left, now and then."""
    done = step + 1 - start
    if done == 1 or (step + 1) % log_every == 0:
        per_step = (time.perf_counter() - t_start) / done
        log(f"step {step + 1}/{steps} {loss} lr {lr:.1e} {tokens / per_step:.0f} tok/s, "
            f"eta {per_step * (steps - step - 1) / 60:.1f} min")


def train(target, tokenizer, settings: dict, out_dir: Path, work_dir: Path, resume: bool) -> dict:
    device = target.device
    torch.manual_seed(settings["seed"])
    layers = settings["layers"]
    draft = build_draft(target, layers, torch.float32)
    params = {n: p for n, p in draft.named_parameters() if not n.startswith(SHARED_PREFIXES)}
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
        resumed_history(settings, state["settings"], start)
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
        save_state({"draft": own, "optimizer": optimizer.state_dict(), "step": step, "metrics": metrics,
                    "settings": settings}, state_path)
        final = {"steps_done": step, "heldout_agreement": metrics["agreement"][-1][1],
                 "heldout_prompts": len(seqs), "heldout_positions": sum(int(s[2].numel()) for s in seqs)}
        save_draft(draft, out_dir, layers, settings["target"], extra={"steps_done": step})
        write_json(out_dir / "metrics.json", {**final, **metrics})
        write_json(out_dir / "settings.json", settings)
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
        log_step(step, start, steps, t_start, ids.numel(), f"loss {float(loss.detach()):.3f}",
                 optimizer.param_groups[0]["lr"], settings["log_every"])
        if (step + 1) % settings["save_every"] == 0 or step + 1 == steps:
            checkpoint(step + 1)
    return metrics

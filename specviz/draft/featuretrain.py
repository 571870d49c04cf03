"""Training the feature-conditioned draft (`distill --kind feature`).

1. answers: the target's own greedy and sampled answers to the train prompts
   (`data.generate_answers`, shared with the layer-pruned recipe);
2. features, once: rows of the same mix `data.DistillData` builds (the answers plus
   offline text, part chat-wrapped) go through the target (bf16, no grad); token
   ids (int32) and final-normed hidden states (fp16, ~1.2 KB per token) are
   stored in shards under the work dir. Resumable: finished shards are skipped;
3. training, on the stored features only (the target's head over the vocabulary
   subset is the only target weight used): loss per unrolled step
   SmoothL1(f_hat, f) + 0.1 x soft cross-entropy against softmax(head(f)), uniform
   noise on the input features, and HASS-style unrolling: step s feeds the
   draft's own predictions from step s-1 and attends, like a tree node at depth
   s+1, to true-feature keys up to s slots back plus its s predicted ancestors.
   Resumable checkpoints (weights + optimiser + step) in the work dir; the
   shipped directory gets feature.safetensors, feature.json, vocab.json,
   settings.json and metrics.json at every checkpoint;
4. evaluation: greedy top-1 agreement with the target at depth 1, 2, 3 on the
   held-out prompts' greedy continuations (never trained on).

With `taps` (`--taps 4,14,24`), each true feature row also carries those target
layers' outputs (EAGLE-3); the first unrolled step reads them, later steps read
the draft's own predictions, as deeper tree levels do, and the loss still
regresses the final-normed state alone.
"""

from __future__ import annotations

import collections
import json
import math
import shutil
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ..engine.lean import attention_kernels, tapped_features
from ..errors import InvalidInput
from ..paths import write_json
from .data import DistillData, log, read_jsonl
from .feature import FeatureDraft, save_feature_draft
from .train import log_step, lr_at, resumed_history, save_state
from .vocab import VOCAB_FILE, load_vocab

SHARD_BATCHES = 10
FIT_AFTER = 20   # steps timed before a deadline fixes the schedule's length


# ---------------------------------------------------------------------------
# Features, computed once
# ---------------------------------------------------------------------------


@torch.inference_mode()
def target_features(target, ids: torch.Tensor, taps: tuple[int, ...] = ()) -> torch.Tensor:
    """The target's final-normed hidden states (B, n, H) for token rows (B, n); with `taps`, the
    tapped layers' outputs follow on each row (B, n, H x (1 + len(taps)))."""
    with attention_kernels(target.device):
        out = target.model(input_ids=ids.to(target.device), output_hidden_states=bool(taps))
    return tapped_features(out.last_hidden_state, out.hidden_states, taps)


def suite_prompts() -> set[str]:
    """Every prompt of the benchmark suites (assets/suites/*.jsonl): never trained on."""
    from ..paths import assets_dir

    found = set()
    for path in sorted((assets_dir() / "suites").glob("*.jsonl")):
        found |= {r["prompt"] for r in read_jsonl(path) if "prompt" in r}
    return found


def distill_data(tokenizer, work_dir: Path, settings: dict) -> DistillData:
    """The training mix: the target's answers (those to benchmark prompts left out, so the benchmark
    measures the draft on prompts it has never seen) and offline text."""
    bench = suite_prompts()
    answers = [a for a in read_jsonl(work_dir / "answers.jsonl") if a["prompt"] not in bench]
    settings["answers_used"] = len(answers)
    return DistillData(tokenizer, answers, settings["seed"], settings["seq_len"], settings["batch"],
                       settings["answer_rows"], settings["chat_wrap"])


def precompute(target, tokenizer, work_dir: Path, settings: dict) -> list[Path]:
    """Shards feat-XXXX.pt of SHARD_BATCHES batches each (the `distill_data` mix); skips shards already written."""
    feat_dir = work_dir / "features"
    feat_dir.mkdir(parents=True, exist_ok=True)
    data = distill_data(tokenizer, work_dir, settings)
    n_shards = math.ceil(settings["feature_batches"] / SHARD_BATCHES)
    shards, t0, done_tokens = [], time.perf_counter(), 0
    for s in range(n_shards):
        path = feat_dir / f"feat-{s:04d}.pt"
        shards.append(path)
        if path.exists():
            continue
        ids = torch.cat([data.batch_at(k) for k in range(s * SHARD_BATCHES, (s + 1) * SHARD_BATCHES)])
        taps = tuple(settings.get("taps", ()))
        feats = torch.cat([target_features(target, ids[i:i + 8], taps).to(torch.float16).cpu()
                           for i in range(0, len(ids), 8)])
        save_state({"ids": ids.to(torch.int32), "feats": feats}, path)
        done_tokens += ids.numel()
        log(f"features: shard {s + 1}/{n_shards}, {done_tokens / (time.perf_counter() - t0):.0f} tok/s")
    return shards


def heldout_features(target, work_dir: Path | None, rows_in: list[dict] | None = None,
                     taps: tuple[int, ...] = ()) -> list[dict]:
    """Token ids, target features (and tapped layers') and target argmax of each held-out greedy
    continuation (cached per set of taps)."""
    name = "heldout_features.pt" if not taps else f"heldout_features-taps{'-'.join(map(str, taps))}.pt"
    cache = work_dir / name if work_dir is not None else None
    if cache is not None and cache.exists():
        return torch.load(cache, weights_only=False)
    rows = []
    for r in rows_in if rows_in is not None else read_jsonl(work_dir / "heldout.jsonl"):
        ids = torch.tensor([r["prompt_ids"] + r["answer_ids"]])
        feats = target_features(target, ids, taps)
        top1 = target.lm_head(feats[..., :target.config.hidden_size]).argmax(-1)[0]
        rows.append({"ids": ids[0], "n_prompt": len(r["prompt_ids"]), "feats": feats[0].to(torch.float16).cpu(),
                     "top1": top1.cpu()})
    if cache is not None:
        torch.save(rows, cache)
    return rows


# ---------------------------------------------------------------------------
# Unrolled forward (training and evaluation)
# ---------------------------------------------------------------------------


def unroll_mask(n: int, step: int, device) -> torch.Tensor:
    """Attention mask (n, (step+1) n) for unrolled step `step` over keys [K0 | K1 | ... | K_step].

    The query at slot j is a tree node at depth step+1 whose root pair sits at slot
    j - step: it sees true-feature keys K0 at slots <= j - step and, for r = 1..step,
    the predicted key K_r at slot j - step + r (its ancestors and itself).
    """
    j = torch.arange(n, device=device)
    blocks = [j[None, :] <= (j[:, None] - step)] + [j[None, :] == (j[:, None] - step + r) for r in range(1, step + 1)]
    allowed = torch.cat(blocks, dim=1)
    allowed[:, 0] |= ~allowed.any(dim=1)   # slots j < step have nothing valid: keep softmax finite
    return allowed


def unrolled(draft: FeatureDraft, ids: torch.Tensor, feats_in: torch.Tensor, steps: int,
             detach: bool = True) -> list[torch.Tensor]:
    """Predicted features (B, n, H) of each unrolled step; slot j of step s is valid for j >= s."""
    B, n = ids.shape
    cos, sin = draft.rotary(torch.arange(n, device=ids.device), feats_in.dtype)
    keys = [[] for _ in range(draft.n_layers)]     # per layer: K_0, K_1, ... of the steps so far
    values = [[] for _ in range(draft.n_layers)]
    outs = []

    def kv(i, k, v):
        keys[i].append(k)
        values[i].append(v)
        return torch.cat(keys[i], 2), torch.cat(values[i], 2)

    f_in = feats_in
    for s in range(steps):
        if s > 0:
            prev = outs[-1].detach() if detach else outs[-1]
            f_in = torch.cat([prev[:, :1], prev[:, :-1]], dim=1)   # slot j reads the prediction made at j-1
        x = draft.fuse(ids, f_in)
        mask = None if s == 0 else unroll_mask(n, s, ids.device)[None, None]
        outs.append(draft.layers_then_norm(x, cos, sin, kv, mask, causal=s == 0))
    return outs


@torch.inference_mode()
def evaluate_depths(draft: FeatureDraft, rows: list[dict], depths: int = 3, widen: bool = False) -> dict:
    """Greedy top-1 agreement with the target at depth 1..depths on held-out continuations.

    Slot j (pair (f_j, x_{j+1})) predicts f_{j+1}, whose argmax should equal the
    target's argmax at position j+1; counted where position j+1 is in the
    continuation. Depth d uses d-1 of the draft's own predicted features.
    widen: the head as Sequoia runs it, with rows for the prompt's tokens and for every
    token written before the drafted one (`drafter.HeadRows.widen`); else the head's own rows.
    """
    hits = [0] * depths
    totals = [0] * depths
    dtype = draft.fc.weight.dtype
    for r in rows:
        ids, n_prompt = r["ids"].to(draft.fc.weight.device), r["n_prompt"]
        feats = r["feats"].to(ids.device, dtype)
        with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=dtype == torch.float32):
            outs = unrolled(draft, ids[None, 1:], feats[None, :-1], depths)
        target_next = r["top1"].to(ids.device)[1:]   # target argmax at position j+1, for slot j
        n = target_next.numel()
        lo = max(0, n_prompt - 2)
        extra, known_from = _written_rows(draft.vocab_ids, ids, n_prompt) if widen else (None, None)
        for s, out in enumerate(outs):
            start = max(lo, s)
            logits = draft.logits(out[0].float())
            pred = draft.vocab_ids[logits.argmax(-1)]
            if extra is not None:
                # Slot j at depth s + 1 drafts after the committed tokens x_0 .. x_{j+1-s}.
                slots = torch.arange(out.shape[1], device=ids.device)
                extra_logits = out[0].float() @ draft._target[0].lm_head.weight[extra].float().T
                extra_logits.masked_fill_(known_from[None, :] > (slots[:, None] + 1 - s), float("-inf"))
                both = torch.cat([logits, extra_logits], dim=-1).argmax(-1)
                pred = torch.cat([draft.vocab_ids, extra])[both]
            hits[s] += int((pred[start:n - 1] == target_next[start:n - 1]).sum())
            totals[s] += n - 1 - start
    return {f"depth{d + 1}": round(hits[d] / max(totals[d], 1), 4) for d in range(depths)} | {
        "positions": totals[0]}


def _written_rows(vocab_ids: torch.Tensor, ids: torch.Tensor, n_prompt: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens of a sequence the head lacks, and the position from which Sequoia's head has each:
    0 for the prompt's (added before the run), else where it is first written."""
    first: dict[int, int] = {}
    for pos, t in enumerate(ids.tolist()):
        first.setdefault(t, 0 if pos < n_prompt else pos)
    have = set(vocab_ids.tolist())
    tokens = [t for t in first if t not in have]
    return (torch.tensor(tokens, dtype=torch.long, device=ids.device),
            torch.tensor([first[t] for t in tokens], dtype=torch.long, device=ids.device))


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


class ShardStream:
    """Batches of (ids, feats) drawn from the shards; batch k is a pure function of (seed, k)."""

    def __init__(self, shards: list[Path], batch: int, seed: int):
        self.shards, self.batch, self.seed = shards, batch, seed
        self._cache: dict[int, dict] = {0: torch.load(shards[0], weights_only=False)}
        self.rows_per_shard = self._cache[0]["ids"].shape[0]

    def _shard(self, i: int) -> dict:
        if i not in self._cache:
            if len(self._cache) >= 4:
                self._cache.pop(next(iter(self._cache)))
            self._cache[i] = torch.load(self.shards[i], weights_only=False)
        return self._cache[i]

    def batch_at(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        # Epochs walk the shards in a seeded order, a shard's rows in a seeded order.
        per_shard = self.rows_per_shard // self.batch
        per_epoch = per_shard * len(self.shards)
        epoch, within = divmod(k, per_epoch)
        g = torch.Generator().manual_seed(self.seed * 7919 + epoch)
        order = torch.randperm(len(self.shards), generator=g)
        shard_i, b = divmod(within, per_shard)
        shard = self._shard(int(order[shard_i]))
        rows = torch.randperm(self.rows_per_shard, generator=g)[b * self.batch:(b + 1) * self.batch]
        return shard["ids"][rows].long(), shard["feats"][rows]


class OnlineFeatures:
    """Batches of (ids, feats) whose features the target computes when asked.

    On a GPU the teacher's forward over a batch costs less than reading its stored
    features back (1.2 KB per token), so `--online-features` keeps only token ids
    (prepared once, in parallel) and runs the frozen target inside the loop.
    Batch k is the same pure function of (seed, k) as in the stored shards.
    """

    def __init__(self, target, ids: torch.Tensor, taps: tuple[int, ...] = ()):
        self.target, self.ids, self.taps = target, ids, taps   # ids (n_batches, batch, seq_len)

    def batch_at(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self.ids[k % len(self.ids)].to(self.target.device)
        # clone: an inference-mode tensor cannot be saved for the draft's backward pass.
        return ids, target_features(self.target, ids, self.taps).clone()


def online_features(target, tokenizer, work_dir: Path, settings: dict, workers: int) -> OnlineFeatures:
    from .data import batches_in_parallel

    data = distill_data(tokenizer, work_dir, settings)
    t0 = time.perf_counter()
    ids = batches_in_parallel(data, settings["feature_batches"], workers)
    log(f"online features: {ids.numel() / 1e6:.1f}M token ids in {len(ids)} batches "
        f"({time.perf_counter() - t0:.0f} s, {workers} processes)")
    return OnlineFeatures(target, ids, tuple(settings.get("taps", ())))


class DeadlinePace:
    """Fits a run's length to its deadline from the pace of its recent steps.

    The length is first set once FIT_AFTER steps are timed (inside the warmup, whose learning rates do
    not depend on it), so the run ends on its cosine tail before the deadline, the time left shared with
    the checkpoints still to come. A lent GPU is shared and a CPU may be loaded by other work, so that
    pace can turn out wrong either way: the length is refitted after every step to the last steps' pace
    (the cosine tail stretches or shrinks with it), and a run whose next step, at the last one's pace,
    would leave no time for the final checkpoint ends now, its checkpoint saved, instead of being cut off
    by the machine's limit with its last steps lost.
    """

    def __init__(self, deadline: float, most: int, save_every: int):
        self.deadline, self.most, self.save_every = deadline, most, save_every
        # Step durations, checkpoints apart. The first step pays for CUDA's kernels, the allocator and the
        # caches warming up (on the first H200 lease 85 ms a step read over the first 20 steps, 70 ran after,
        # which ended the run 1.6 of its 8 minutes early), so it is not kept.
        self.recent: collections.deque[float] = collections.deque(maxlen=FIT_AFTER - 1)
        self.timed = 0
        self.logged: int | None = None

    def steps_after(self, step: int, duration: float, steps: int, checkpoint_seconds: float) -> int:
        """The run's length once step `step` (0-based) has taken `duration` seconds."""
        self.timed += 1
        if self.timed > 1:
            self.recent.append(duration)
        if self.timed < FIT_AFTER:
            return steps
        left = self.deadline - time.perf_counter() - checkpoint_seconds   # the final checkpoint is reserved
        per_step = sum(self.recent) / len(self.recent)
        # A periodic checkpoint due now comes before the next step, so it must fit too.
        due = checkpoint_seconds if (step + 1) % self.save_every == 0 else 0.0
        if self.logged is not None and step + 1 < steps and max(per_step, duration) + due > left:
            log(f"the deadline is {max(left + checkpoint_seconds, 0.0):.0f} s away: the run ends at step "
                f"{step + 1}, not {steps}")
            return step + 1
        # A checkpoint every save_every steps is part of a step's cost.
        fitted = fit_steps(self.most, step + 1, per_step + checkpoint_seconds / self.save_every, left)
        if self.logged is None or abs(fitted - self.logged) > 0.05 * self.logged:
            log(f"{left / 60:.1f} min left at {per_step * 1000:.0f} ms/step: the run ends at step {fitted}")
            self.logged = fitted
        return fitted


def fit_steps(steps: int, step_now: int, per_step: float, seconds_left: float) -> int:
    """Total steps for a run at `step_now` that must end within `seconds_left`, at `per_step` seconds a step;
    `steps` stays the upper bound, and a run never ends before the step it is at."""
    return max(step_now, min(steps, step_now + int(max(seconds_left, 0.0) / max(per_step, 1e-9))))


def warm_start(draft: FeatureDraft, target, init_dir: Path, settings: dict, metrics: dict) -> int:
    """Load a shipped draft's weights (not its optimiser) to train it further on a machine without its work
    dir; its settings join the history. Returns the steps it had done, so step counts stay cumulative."""
    from .feature import load_feature_draft

    shipped = load_feature_draft(target, init_dir, torch.float32)   # checks its shapes and weights
    if not torch.equal(shipped.vocab_ids.cpu(), draft.vocab_ids.cpu()):
        raise InvalidInput(f"--init-from {init_dir}: its head vocabulary differs from --vocab-from's")
    if shipped.taps and shipped.taps != draft.taps:   # its fc_taps would be dropped without a word
        raise InvalidInput(f"--init-from {init_dir}: trained with taps {list(shipped.taps)}, not {list(draft.taps)}")
    if shipped.n_layers > draft.n_layers:   # its later layers would be dropped without a word
        raise InvalidInput(f"--init-from {init_dir}: a draft of {shipped.n_layers} layers, more than {draft.n_layers}")
    draft.load_state_dict(shipped.own_state(), strict=False)
    before = json.loads((init_dir / "settings.json").read_text()) if (init_dir / "settings.json").exists() else {}
    done = json.loads((init_dir / "metrics.json").read_text()) if (init_dir / "metrics.json").exists() else {}
    steps_before = int(done.get("steps_done", 0))
    settings["init_from"] = {"dir": str(init_dir), "steps_done": steps_before}
    settings["history"] = before.pop("history", []) + ([{**before, "until_step": steps_before}] if before else [])
    # Its curves stay in the record: a reader of metrics.json sees the whole history, not this run's part.
    metrics.update(tokens_seen=int(done.get("tokens_seen", 0)), loss=list(done.get("loss", [])),
                   agreement=list(done.get("agreement", [])))
    log(f"warm start from {init_dir} (step {steps_before}, {metrics['tokens_seen'] / 1e6:.1f}M tokens seen)")
    return steps_before


def _new_feature_draft(target, settings: dict, init_from: Path | None) -> FeatureDraft:
    """The draft to train, its layers from the target's (a warm start loads its weights later)."""
    vocab_ids = load_vocab(Path(settings["vocab_from"]), target.config.vocab_size)
    if vocab_ids is None:
        raise InvalidInput(f"{settings['vocab_from']} holds no {VOCAB_FILE}")
    if init_from is not None and "taps" not in settings:   # a warm start keeps its draft's taps
        settings["taps"] = json.loads((init_from / "feature.json").read_text()).get("taps", [])
    taps = tuple(settings.get("taps", ()))
    draft = FeatureDraft(target, vocab_ids, torch.float32, taps, int(settings.get("layers", 1)))
    draft.init_from_target(target)   # layers a warm start adds keep this: the identity, until trained
    return draft


def _feature_optimizer(draft: FeatureDraft, settings: dict) -> tuple[list, torch.optim.Optimizer]:
    """The trained parameters and their optimiser.

    Taps start at zero weight on a draft that may already be trained: Adam moves a weight about lr per
    step whatever its gradient's size, so at the base rate they took 100 steps to reach a twentieth of
    fc's scale. Their own, higher rate (taps_lr_scale x lr) lets them catch up. Added layers start
    with zeroed outputs, the same story (`new_layers_lr_scale`).
    """
    params = list(draft.requires_grad_(True).parameters())
    tap_params = [p for name, p in draft.named_parameters() if "tap" in name]
    layer_params = [p for name, p in draft.named_parameters() if name.startswith("more_layers.")]
    base_params = [p for name, p in draft.named_parameters() if "tap" not in name and
                   not name.startswith("more_layers.")]
    groups = [{"params": base_params, "scale": 1.0}]
    if tap_params:
        groups.append({"params": tap_params, "scale": float(settings.get("taps_lr_scale", 1.0))})
    if layer_params:
        groups.append({"params": layer_params, "scale": float(settings.get("new_layers_lr_scale", 1.0))})
    return params, torch.optim.AdamW(groups, lr=settings["lr"], betas=(0.9, 0.95), weight_decay=0.0)


def _resume_feature_run(state_path: Path, work_dir: Path, draft: FeatureDraft, optimizer, settings: dict):
    """(start step, metrics, the last checkpoint's seconds, steps before this run) of a resumed run."""
    state = torch.load(state_path, map_location=draft.fc.weight.device, weights_only=False)
    taps = draft.taps
    if tuple(state["settings"].get("taps", ())) != taps:
        raise InvalidInput(f"--resume: the run in {work_dir} taps layers {state['settings'].get('taps', [])}, "
                           f"not {list(taps)}")
    if int(state["settings"].get("layers", 1)) != draft.n_layers:
        raise InvalidInput(f"--resume: the run in {work_dir} trains a draft of "
                           f"{state['settings'].get('layers', 1)} layers, not {draft.n_layers}")
    draft.load_state_dict(state["draft"], strict=False)
    optimizer.load_state_dict(state["optimizer"])
    start, metrics = state["step"], state["metrics"]
    # What a checkpoint cost before: a resumed run reserves it for its final one from its first step.
    checkpoint_seconds = float(state.get("checkpoint_seconds", 0.0))
    steps_before = state["settings"].get("steps_before", 0)
    resumed_history(settings, state["settings"], start)
    log(f"resumed at step {steps_before + start}")
    return start, metrics, checkpoint_seconds, steps_before


def _feature_loss(draft: FeatureDraft, ids: torch.Tensor, feats: torch.Tensor, head: torch.Tensor, settings: dict,
                  feat_rms: float) -> tuple[torch.Tensor, list[float]]:
    """The unrolled training loss of one batch, and each unrolled step's part of it."""
    H = draft.hidden
    f_in = feats[:, :-1]
    noise = settings["noise"]
    if noise > 0:   # on the final-normed part: a tree's deeper levels read predicted ones
        noisy = f_in[..., :H] + (torch.rand_like(f_in[..., :H]) - 0.5) * (2 * noise * feat_rms)
        f_in = torch.cat([noisy, f_in[..., H:]], dim=-1)
    f_tgt = feats[:, 1:, :H]
    with torch.no_grad():
        t_logp = F.log_softmax(F.linear(f_tgt, head), -1)
        t_p = t_logp.exp()
    with torch.autocast(ids.device.type, dtype=torch.bfloat16):
        outs = unrolled(draft, ids[:, 1:], f_in, settings["unroll"])
    loss = 0.0
    parts = []
    for s, out in enumerate(outs):
        out = out[:, s:].float()
        reg = F.smooth_l1_loss(out, f_tgt[:, s:])
        d_logp = F.log_softmax(F.linear(out, head), -1)
        ce = -(t_p[:, s:] * d_logp).sum(-1).mean()
        part = reg + settings["ce_weight"] * ce
        loss = loss + settings["unroll_weights"][s] * part
        parts.append(round(float(part.detach()), 4))
    return loss, parts


def train_feature(target, tokenizer, settings: dict, out_dir: Path, work_dir: Path, resume: bool,
                  stream=None, deadline: float | None = None, init_from: Path | None = None) -> dict:
    """Train (or resume, or warm-start from a shipped draft) the feature draft; with `deadline` (a
    time.perf_counter() value) the schedule's length is set from the first steps' pace so that the run,
    its checkpoints included, ends by then."""
    device = target.device
    torch.manual_seed(settings["seed"])
    draft = _new_feature_draft(target, settings, init_from)
    params, optimizer = _feature_optimizer(draft, settings)
    metrics: dict = {"loss": [], "agreement": [], "tokens_seen": 0}
    start = 0
    checkpoint_seconds = 0.0   # the last checkpoint's duration, for fitting the run to a deadline
    # A warm start keeps counting from the shipped draft's steps (what a reader wants to know of a checkpoint);
    # the learning-rate schedule counts this run's steps only.
    steps_before = warm_start(draft, target, init_from, settings, metrics) if init_from is not None else 0
    state_path = work_dir / "feature_state.pt"
    if resume and state_path.exists():
        start, metrics, checkpoint_seconds, steps_before = _resume_feature_run(state_path, work_dir, draft,
                                                                               optimizer, settings)
    settings["steps_before"] = steps_before

    if stream is None:
        shards = sorted((work_dir / "features").glob("feat-*.pt"))[:settings["feature_shards"] or None]
        if not shards:
            raise InvalidInput(f"no feature shards in {work_dir / 'features'}")
        stream = ShardStream(shards, settings["batch"], settings["seed"])
        log(f"training on {len(shards)} shards ({len(shards) * stream.rows_per_shard} rows of {settings['seq_len']})")
    heldout = heldout_features(target, work_dir, taps=draft.taps)
    head = draft.head.float()
    # Feature scale for the input noise: the RMS of stored features.
    sample = stream.batch_at(0)[1][..., :draft.hidden].float()
    feat_rms = float(sample.pow(2).mean().sqrt())

    def checkpoint(step: int) -> None:
        nonlocal checkpoint_seconds
        t0 = time.perf_counter()
        draft.eval()
        agree = evaluate_depths(draft, heldout, 3)
        if metrics["agreement"] and metrics["agreement"][-1][0] == steps_before + step:
            metrics["agreement"].pop()   # a warm start re-measures the step it starts from
        metrics["agreement"].append([steps_before + step, agree])
        save_state({"draft": {k: v.detach().clone() for k, v in draft.state_dict().items()},
                    "optimizer": optimizer.state_dict(), "step": step, "metrics": metrics, "settings": settings,
                    "checkpoint_seconds": checkpoint_seconds}, state_path)
        final = {"steps_done": steps_before + step, "heldout_agreement": agree, "heldout_prompts": len(heldout)}
        save_feature_draft(draft, out_dir, settings["target"], extra={"steps_done": steps_before + step,
                                                                       "heldout_agreement": agree})
        src = Path(settings["vocab_from"]) / VOCAB_FILE
        if src.resolve() != (out_dir / VOCAB_FILE).resolve():
            shutil.copyfile(src, out_dir / VOCAB_FILE)
        write_json(out_dir / "metrics.json", {**final, **metrics})
        write_json(out_dir / "settings.json", settings)
        checkpoint_seconds = time.perf_counter() - t0
        log(f"step {steps_before + step}: held-out agreement {agree}; checkpoint in {out_dir}")

    if start == 0:
        checkpoint(0)
    steps, t_start = settings["steps"], time.perf_counter()
    pace = DeadlinePace(deadline, steps, settings["save_every"]) if deadline is not None else None
    for step in range(start, settings["steps"]):
        if step >= steps:   # --minutes shortened the run
            break
        t_step = time.perf_counter()
        draft.train()
        for group in optimizer.param_groups:
            # .get: a run resumed from before the taps saved one group without a scale
            group["lr"] = group.get("scale", 1.0) * lr_at(step, steps, settings["lr"], settings["warmup"], 0.05)
        ids, feats = stream.batch_at(step)
        ids, feats = ids.to(device), feats.to(device).float()
        loss, parts = _feature_loss(draft, ids, feats, head, settings, feat_rms)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        optimizer.step()
        metrics["loss"].append([steps_before + step + 1, parts])
        metrics["tokens_seen"] += ids.numel()
        if pace is not None:
            steps = settings["steps"] = pace.steps_after(step, time.perf_counter() - t_step, steps,
                                                         checkpoint_seconds)
        log_step(step, start, steps, t_start, ids.numel(), f"loss/step {parts}", optimizer.param_groups[0]["lr"],
                 settings["log_every"])
        if (step + 1) % settings["save_every"] == 0 or step + 1 == steps:
            checkpoint(step + 1)
    return metrics

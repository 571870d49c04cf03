"""Plain autoregressive decoding: the baseline every speedup is measured against.

One target forward per token over a KV cache, as lean as gpt-fast's loop. For
Llama-family models (the offline default) the forward is a short function over
the model's own weights with a preallocated KV cache and precomputed rotary
tables: transformers' module machinery, mask building and cache bookkeeping cost
about a fifth of each step on a CPU (measured with pyinstrument, see the bench
notes). It runs the very same tensor ops as transformers' Llama, so greedy fp32
output equals `model.generate`. Any other architecture uses the model's own
forward over a DynamicCache, with no attention mask (batch 1 with no padding is
plainly causal) and only the last position's logits computed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..kvcache import new_cache
from ..sampling import next_token
from ..trace import PHASE_TARGET, PHASE_VERIFY, SOURCE_AR, StepRecord
from .base import Decoder, PhaseTimer


def lean_llama_supported(model) -> bool:
    """True when `LeanLlama` computes exactly what the model's own forward does."""
    cfg = model.config
    rope = getattr(cfg, "rope_parameters", None) or {}
    inner = getattr(model, "model", None)
    return (getattr(cfg, "model_type", None) == "llama" and inner is not None
            and getattr(cfg, "_attn_implementation", "sdpa") in ("sdpa", "eager")
            and rope.get("rope_type", "default") == "default"
            and not getattr(cfg, "attention_bias", False) and not getattr(cfg, "mlp_bias", False)
            and getattr(cfg, "hidden_act", "silu") == "silu" and getattr(cfg, "pretraining_tp", 1) == 1
            and hasattr(inner, "rotary_emb") and hasattr(model, "lm_head"))


class LeanLlama:
    """A batch-1 Llama forward over `model`'s weights (no copies) and a preallocated cache."""

    def __init__(self, model, max_len: int):
        cfg, inner = model.config, model.model
        device, self.dtype = model.lm_head.weight.device, model.lm_head.weight.dtype
        self.eps = cfg.rms_norm_eps
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.gqa = self.n_heads != self.n_kv
        self.scale = inner.layers[0].self_attn.scaling
        self.embed, self.final_norm, self.lm_head = inner.embed_tokens.weight, inner.norm.weight, model.lm_head.weight
        self.layers = [(layer.input_layernorm.weight, layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight,
                        layer.self_attn.v_proj.weight, layer.self_attn.o_proj.weight,
                        layer.post_attention_layernorm.weight, layer.mlp.gate_proj.weight,
                        layer.mlp.up_proj.weight, layer.mlp.down_proj.weight) for layer in inner.layers]
        # Rotary tables for every position this run can reach, computed as transformers does.
        rotary = inner.rotary_emb
        freqs = torch.arange(max_len, device=device)[:, None].float() * rotary.inv_freq.to(device, torch.float)
        angles = torch.cat((freqs, freqs), dim=-1)
        self.cos = (angles.cos() * rotary.attention_scaling).to(self.dtype)
        self.sin = (angles.sin() * rotary.attention_scaling).to(self.dtype)
        shape = (1, self.n_kv, max_len, self.head_dim)
        self.keys = [torch.empty(shape, dtype=self.dtype, device=device) for _ in self.layers]
        self.values = [torch.empty(shape, dtype=self.dtype, device=device) for _ in self.layers]

    def _rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * h.to(x.dtype)

    @staticmethod
    def _rotate_half(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def __call__(self, input_ids: torch.Tensor, start: int) -> torch.Tensor:
        """Logits of the last position after feeding `input_ids` at positions start, start+1, ..."""
        n = input_ids.shape[1]
        end = start + n
        cos, sin = self.cos[start:end], self.sin[start:end]
        x = F.embedding(input_ids, self.embed)
        for i, (w_in, wq, wk, wv, wo, w_post, w_gate, w_up, w_down) in enumerate(self.layers):
            h = self._rms_norm(x, w_in)
            q = F.linear(h, wq).view(1, n, self.n_heads, self.head_dim).transpose(1, 2)
            k = F.linear(h, wk).view(1, n, self.n_kv, self.head_dim).transpose(1, 2)
            v = F.linear(h, wv).view(1, n, self.n_kv, self.head_dim).transpose(1, 2)
            q = q * cos + self._rotate_half(q) * sin
            k = k * cos + self._rotate_half(k) * sin
            self.keys[i][:, :, start:end] = k
            self.values[i][:, :, start:end] = v
            # One query attends to everything before it; a prefill is plainly causal.
            attn = F.scaled_dot_product_attention(q, self.keys[i][:, :, :end], self.values[i][:, :, :end],
                                                  is_causal=n > 1, scale=self.scale, enable_gqa=self.gqa)
            x = x + F.linear(attn.transpose(1, 2).reshape(1, n, -1), wo)
            h = self._rms_norm(x, w_post)
            x = x + F.linear(F.silu(F.linear(h, w_gate)) * F.linear(h, w_up), w_down)
        return F.linear(self._rms_norm(x[:, -1:], self.final_norm), self.lm_head)[:, -1]


class AutoregressiveDecoder(Decoder):
    method = "ar"
    lean = True  # False: always use the model's own forward (kept for A/B measurements)

    def __init__(self, pair, prompt, prompt_ids, sampling, max_new_tokens, **options):
        if options:
            raise TypeError(f"autoregressive decoding takes no options, got {sorted(options)}")
        super().__init__(pair, prompt, prompt_ids, sampling, max_new_tokens)
        self.model = pair.target
        self.position = 0
        if self.lean and lean_llama_supported(self.model):
            self.forward = LeanLlama(self.model, len(self.prompt_ids) + self.max_new_tokens)
            self.cache = None
        else:
            self.forward = None
            self.cache = new_cache(self.model)
        # The next forward's input: the whole prompt first (prefill), then one token.
        self.pending = torch.tensor([self.prompt_ids], dtype=torch.long, device=self.device)

    def _step(self) -> StepRecord:
        timer = PhaseTimer(self.device)
        timer.start(PHASE_TARGET)
        n_in = self.pending.shape[1]
        if self.forward is not None:
            logits = self.forward(self.pending, self.position)
        else:
            logits = self.model(input_ids=self.pending, past_key_values=self.cache, use_cache=True,
                                logits_to_keep=1).logits[:, -1]
        self.position += n_in
        timer.start(PHASE_VERIFY)
        token = next_token(logits, self.sampling, self.generator)
        self.pending = token.view(1, 1)
        token_id = int(token)
        return self._emit([token_id], [SOURCE_AR], n_in, timer.stop())

    def close(self) -> None:
        self.cache = None
        self.forward = None
        self.pending = None

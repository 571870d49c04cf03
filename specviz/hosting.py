"""Limits for serving SpecViz to the public, read from environment variables.

Locally everything is allowed; on a Hugging Face Space (which sets SPACE_ID) or
with SPECVIZ_HOSTED=1 the defaults tighten: only the configured model ids, shorter
runs, a bounded queue. Every knob can be set explicitly; the README lists them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Mapping

from .errors import InvalidInput

# Model ids a hosted app may load when SPECVIZ_ALLOWED_MODELS is not set: the presets.
PRESET_MODEL_IDS = (
    "default", "feature", "independent",   # the offline default and its shipped drafts (selectors, not Hub ids)
    "HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct",
    "meta-llama/Llama-2-7b-chat-hf", "JackFram/llama-68m",
    "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct",
)
# Preset models whose Hub repositories are gated (a licence to accept, then a token to download):
# served only when the server has a Hugging Face token, never preloaded by a public Space.
GATED_MODEL_IDS = ("meta-llama/Llama-2-7b-chat-hf",)
# ZeroGPU: what each race asks `spaces.GPU` for. Its own default (60 s) would cut a hosted
# race (120 s) in half; 120 s is what ZeroGPU grants without special quota.
ZEROGPU_DURATION_S = 120
# Seconds of a ZeroGPU call spent before the race's clock starts (moving a preset pair onto
# the GPU): the race stops itself this much before ZeroGPU would end the call.
ZEROGPU_SETUP_S = 20


def zerogpu_duration(env: Mapping[str, str] | None = None) -> int:
    """Seconds per race to ask ZeroGPU for: SPECVIZ_ZEROGPU_DURATION, else ZEROGPU_DURATION_S."""
    env = os.environ if env is None else env
    return _number(env, "SPECVIZ_ZEROGPU_DURATION", ZEROGPU_DURATION_S)


def hub_token_available(env: Mapping[str, str] | None = None) -> bool:
    """A Hugging Face token is set: HF_TOKEN (a Space secret arrives as one), or, for the real
    environment, the token `hf auth login` stored (which transformers uses as well)."""
    if env is not None:
        return bool((env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN") or "").strip())
    try:
        from huggingface_hub import get_token

        return bool(get_token())
    except Exception:  # an old or missing huggingface_hub: only the variables count
        return hub_token_available(os.environ)


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = env.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def _number(env: Mapping[str, str], name: str, default: float, cast=int):
    value = env.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = cast(value)
    except ValueError:
        raise InvalidInput(f"environment variable {name} must be a number, got {value!r}") from None
    if number <= 0:
        raise InvalidInput(f"environment variable {name} must be positive, got {value!r}")
    return number


@dataclass(frozen=True)
class HostingLimits:
    hosted: bool = False
    allow_custom_models: bool = True
    allowed_models: tuple[str, ...] = PRESET_MODEL_IDS
    max_new_tokens: int = 1024
    max_prompt_chars: int = 20_000
    max_run_seconds: float = 900.0
    queue_size: int = 16
    max_trace_bytes: int = 64 * 1024 * 1024
    allowed_models_explicit: bool = False   # SPECVIZ_ALLOWED_MODELS was set: it binds custom ids too
    hub_token: bool = False                  # HF_TOKEN is set: gated models (GATED_MODEL_IDS) may load
    extra: dict = field(default_factory=dict)

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> "HostingLimits":
        env = os.environ if env is None else env
        hosted = _flag(env, "SPECVIZ_HOSTED", bool(env.get("SPACE_ID")))
        allowed = tuple(m.strip() for m in env.get("SPECVIZ_ALLOWED_MODELS", "").split(",") if m.strip())
        return HostingLimits(
            hosted=hosted,
            allow_custom_models=_flag(env, "SPECVIZ_ALLOW_CUSTOM_MODELS", not hosted),
            allowed_models=allowed or PRESET_MODEL_IDS,
            allowed_models_explicit=bool(allowed),
            hub_token=hub_token_available(None if env is os.environ else env),
            max_new_tokens=_number(env, "SPECVIZ_MAX_NEW_TOKENS", 256 if hosted else 1024),
            max_prompt_chars=_number(env, "SPECVIZ_MAX_PROMPT_CHARS", 4000 if hosted else 20_000),
            max_run_seconds=_number(env, "SPECVIZ_MAX_RUN_SECONDS", 120.0 if hosted else 900.0, float),
            queue_size=_number(env, "SPECVIZ_QUEUE_SIZE", 8 if hosted else 16),
            max_trace_bytes=_number(env, "SPECVIZ_MAX_TRACE_MB", 16 if hosted else 64) * 1024 * 1024,
        )

    def within_gpu_call(self, duration_s: float) -> "HostingLimits":
        """These limits for races that run inside a ZeroGPU call of `duration_s` seconds: a race
        ends on its own clean time-limit message, keeping its tokens, before ZeroGPU cuts it."""
        budget = max(duration_s - ZEROGPU_SETUP_S, duration_s / 2)
        return replace(self, max_run_seconds=min(self.max_run_seconds, float(budget)))

    def check_model(self, model_id: str | None) -> None:
        """Refuse a model id this deployment does not serve.

        Any id is fine when custom ids are on and no explicit allow-list was given
        (the local default); otherwise the id must be on the list, presets included.
        """
        if model_id is not None and model_id.strip() in GATED_MODEL_IDS and not self.hub_token:
            raise InvalidInput(
                f"model '{model_id.strip()}' is gated on the Hugging Face Hub: this server offers it only "
                "with an HF_TOKEN whose account has accepted its licence (on a Space: a secret named HF_TOKEN)")
        if model_id is None or (self.allow_custom_models and not self.allowed_models_explicit):
            return
        if model_id.strip() not in self.allowed_models:
            raise InvalidInput(
                f"model '{model_id}' is not available here; this deployment serves: "
                f"{', '.join(self.allowed_models)}")

    def gated_notice(self) -> str:
        """One line for the page when gated models this server would otherwise offer are held back."""
        if self.hub_token:
            return ""
        held = [m for m in GATED_MODEL_IDS if m in self.allowed_models
                or (self.allow_custom_models and not self.allowed_models_explicit)]
        if not held:
            return ""
        return (f"{', '.join(held)} (gated) is not offered: set an HF_TOKEN whose account accepted its licence "
                "(on a Space, as a secret).")

    def check_max_new_tokens(self, max_new_tokens: int) -> None:
        if isinstance(max_new_tokens, (int, float)) and max_new_tokens > self.max_new_tokens:
            raise InvalidInput(f"max new tokens is capped at {self.max_new_tokens} here, got {max_new_tokens}")

"""Limits for serving SpecViz to the public, read from environment variables.

Locally everything is allowed; on a Hugging Face Space (which sets SPACE_ID) or
with SPECVIZ_HOSTED=1 the defaults tighten: only the configured model ids, shorter
runs, a bounded queue. Every knob can be set explicitly; the README lists them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Mapping

from .errors import InvalidInput
from .methods import registered
from .request import PRESETS

# Model ids a hosted app may load when SPECVIZ_ALLOWED_MODELS is not set: the presets' targets and drafts, in
# order ("default", "feature", "independent": the offline default and its shipped drafts, selectors, not Hub ids).
PRESET_MODEL_IDS = tuple(dict.fromkeys(m for pair in PRESETS.values() for m in pair if m))
# Preset models whose Hub repositories are gated (a licence to accept, then a token to download):
# served only when the server has a Hugging Face token, never preloaded by a public Space.
GATED_MODEL_IDS = ("meta-llama/Llama-2-7b-chat-hf",)
# What ZeroGPU builds a Space with. Source: the Hub's documentation, docs/hub/spaces-zerogpu.md in
# huggingface/hub-docs, "Supported Versions" (read 2026-11-27; that page last changed 2026-07-21).
# A Space whose README front matter or requirements.txt names another version fails to build
# ("No candidate PyTorch version found for ZeroGPU"); tests/test_hosting.py checks ours against these.
ZEROGPU_SUPPORTED_TORCH = ("2.8.0", "2.9.1", "2.10.0", "2.11.0")
ZEROGPU_SUPPORTED_PYTHON = ("3.10.13", "3.12.12")

# ZeroGPU: the most one race may ask `spaces.GPU` for (SPECVIZ_ZEROGPU_DURATION changes it). Each
# call is checked against the visitor's remaining daily quota (2 minutes for a visitor who is not
# logged in), so a race asks for what it needs (`zerogpu_race_seconds`), never this cap by habit.
ZEROGPU_DURATION_S = 120
# Seconds of a ZeroGPU call spent before the race's clock starts: attaching the GPU and moving the
# (already loaded, module-level) pair onto it. The race stops itself this much before ZeroGPU would.
ZEROGPU_SETUP_S = 10
# A first `auto` race on a worker measures the target's and draft's forward times (t(n) up to 1024
# rows) before it decodes; later races read the cached curves.
ZEROGPU_SIZING_S = 20
# One target forward of the offline default on a GPU, eager (launch-bound): 14.5 ms on an H200
# (platform notes, 2026-11-27). Used until this Space has measured its own t(1).
GPU_FORWARD_MS = 15.0
# A step's cost in target forwards, and the tokens it makes, each method's (`Method.step_forwards`,
# `tokens_per_step`: measured on the H200, conservative so that a race rarely meets its own clock).
STEP_FORWARDS = {m.id: m.step_forwards for m in registered().values()}
TOKENS_PER_STEP = {m.id: m.tokens_per_step for m in registered().values()}
ZEROGPU_MARGIN = 1.5
ZEROGPU_MIN_S = 10

# Races in flight at once on ZeroGPU (SPECVIZ_CONCURRENCY changes it). Each `spaces.GPU` call gets a GPU
# slice of its own from Hugging Face's pool, so parallel races neither share a device nor distort each
# other's speeds, and each visitor's quota pays for their own race. 10 is what a Hugging Face staff change
# set on a ZeroGPU Space "so it can be easily scaled out" (`concurrency_limit=10`, quoted in issue 54); the
# `spaces` package (0.51) queues calls beyond the Space's GPU slots itself, so more than those slots only
# moves visitors from Gradio's queue, where the page shows their place and wait, into ZeroGPU's, where
# it shows neither ("Waiting for a GPU slot on this Space"). At 10, a room of 30 pressing Start at once
# runs in three waves: about a minute at the default race's 18 s asked for.
ZEROGPU_CONCURRENCY = 10
# Races waiting on a hosted server (SPECVIZ_QUEUE_SIZE changes it): a room of 30, each with a second
# race queued behind the first wave, without anyone being told the queue is full.
HOSTED_QUEUE_SIZE = 48
# Places in that queue (waiting or running) one client may hold on a hosted server. Clients are told apart
# by what they cannot choose (`ui.places`): a logged-in user by their account, anyone else by the network
# address the request came from. A workshop's room often reaches the Space through one address (a venue's
# Wi-Fi behind one NAT), so an address holds up to a room of 30 and two more (SPECVIZ_PLACES_PER_ADDRESS);
# that still leaves a third of the 48 places to everyone else, so no single address can take them all.
# A logged-in user has their own account's places wherever they come from (SPECVIZ_PLACES_PER_USER).
HOSTED_PLACES_PER_ADDRESS = 32
HOSTED_PLACES_PER_USER = 2
# Proxies in front of the app that append the address they saw to X-Forwarded-For: a Hugging Face
# Space has one (SPECVIZ_TRUSTED_PROXIES changes it; 0 reads the socket's own peer address).
SPACE_TRUSTED_PROXIES = 1
# Seconds past a race's deadline (`max_run_seconds`, counted from the click) before a worker that has not
# ended its race is killed and replaced: a step or a load that hangs cannot hold the server.
WORKER_GRACE_S = 20.0
# Hosts a local server listens on: anything else (0.0.0.0, a LAN address) or a --share link serves
# strangers, and then the hosted limits are on unless the operator turns them off by name.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

# CUDA graphs on ZeroGPU (docs/graphs.md). ZeroGPU does not support torch.compile, so graphs are captured
# plainly with torch.cuda.graph inside the `spaces.GPU` call, and they live only as long as the worker:
# a forked worker captures again, a reused one replays what an earlier race captured.
# A replayed forward of the offline default: a hand-captured graph of the same unfused forward took
# 4.2 ms at 1 row on an H200 against 14.5 ms eager (issue 41). Used until the Space measures its own.
GPU_REPLAY_MS = 4.2
# Capturing one shape runs it eagerly GraphRunner.WARMUP_CALLS (2) times on a side stream and once more
# while recording: about three eager forwards of that shape.
CAPTURE_FORWARDS_PER_SHAPE = 3
# Shapes a method captures in one race (`Method.graph_shapes`). Estimates: sizes are chosen later.
GRAPH_SHAPES = {m.id: m.graph_shapes for m in registered().values()}


def on_zerogpu(env: Mapping[str, str] | None = None) -> bool:
    """True only on ZeroGPU hardware. Every Gradio Space has the `spaces` package, but it switches on
    only where the platform sets SPACES_ZERO_GPU (as `spaces.config` reads it)."""
    env = os.environ if env is None else env
    return (env.get("SPACES_ZERO_GPU") or "").strip().lower() in ("1", "t", "true")


def zerogpu_duration(env: Mapping[str, str] | None = None) -> int:
    """The most seconds one race may ask ZeroGPU for: SPECVIZ_ZEROGPU_DURATION, else ZEROGPU_DURATION_S."""
    env = os.environ if env is None else env
    return _number(env, "SPECVIZ_ZEROGPU_DURATION", ZEROGPU_DURATION_S)


def zerogpu_race_seconds(methods, max_new_tokens: int, *, forward_ms: float | None = None,
                         sizing: bool = False, cap: float = ZEROGPU_DURATION_S,
                         graphs: "GraphsDecision | None" = None) -> int:
    """Seconds one race asks `spaces.GPU` for: setup, a first `auto` race's sizing, graph capture when
    graphs will be captured, and every method's tokens at its step cost, with a margin; at most `cap`.

    `forward_ms` is the target's t(1) on this GPU when the Space has measured it (else GPU_FORWARD_MS);
    `sizing` says an `auto` size still has to be measured; `graphs` is `zerogpu_graphs`'s decision (its
    decode steps cost replays, and its capture is paid in this call). A race that runs longer than it
    asked for still ends on its own clock (the run limit is this minus ZEROGPU_SETUP_S) with its tokens kept.
    """
    step_ms = forward_ms or GPU_FORWARD_MS
    if graphs is not None and graphs.mode == "on":
        step_ms = graphs.replay_ms
    decode_s = sum(max_new_tokens / TOKENS_PER_STEP.get(m, 1.0) * STEP_FORWARDS.get(m, 1.0) * step_ms / 1000.0
                   for m in methods)
    capture_s = graphs.capture_ms / 1000.0 if graphs is not None else 0.0
    seconds = ZEROGPU_SETUP_S + (ZEROGPU_SIZING_S if sizing else 0) + capture_s + ZEROGPU_MARGIN * decode_s
    return int(min(cap, max(ZEROGPU_MIN_S, math.ceil(seconds))))


@dataclass(frozen=True)
class GraphsDecision:
    """Whether a race's decoders run CUDA graphs, and why (the trace records both)."""

    mode: str                  # what the decoders are given: 'on', 'off' (or 'auto' where nothing decided)
    reason: str                # in words, for the trace's settings["graphs_reason"] and the summary line
    capture_ms: float = 0.0    # capture this call is expected to pay (0: none, or graphs already captured)
    saving_ms: float = 0.0     # what replays are expected to save over eager steps in this race
    replay_ms: float = GPU_REPLAY_MS   # the replayed one-token forward the estimate assumed


def zerogpu_graphs(mode: str, methods, max_new_tokens: int, *, eager_ms: float | None = None,
                   replay_ms: float | None = None, capture_ms_per_shape: float | None = None,
                   captured: bool = False) -> GraphsDecision:
    """ZeroGPU's graphs policy for one race: pure arithmetic on what is known before it runs.

    'on' / 'off' are obeyed. For 'auto': graphs already captured in this (reused) worker are always
    replayed (capture is paid); otherwise capture pays when its cost, the shapes the methods capture
    (GRAPH_SHAPES) times a shape's capture (`capture_ms_per_shape`, measured, else
    CAPTURE_FORWARDS_PER_SHAPE eager forwards), is below what replays save: every method's forwards
    (tokens / TOKENS_PER_STEP * STEP_FORWARDS) times (eager forward - replayed forward). With the
    defaults (15 ms eager, 4.2 ms replayed, 45 ms a shape) `ar` pays from 5 tokens, all three
    methods (11 shapes, 495 ms) from 13.
    """
    eager = float(eager_ms or GPU_FORWARD_MS)
    replay = float(replay_ms or GPU_REPLAY_MS)
    forwards = sum(max_new_tokens / TOKENS_PER_STEP.get(m, 1.0) * STEP_FORWARDS.get(m, 1.0) for m in methods)
    saving = forwards * max(0.0, eager - replay)
    per_shape = capture_ms_per_shape if capture_ms_per_shape is not None else CAPTURE_FORWARDS_PER_SHAPE * eager
    shapes = sum(GRAPH_SHAPES.get(m, 1) for m in methods)
    capture = shapes * per_shape
    if mode in ("on", "off"):
        return GraphsDecision(mode, f"graphs {mode}: asked for", capture if mode == "on" and not captured else 0.0,
                              saving if mode == "on" else 0.0, replay)
    if captured:
        return GraphsDecision("on", "auto on ZeroGPU: graphs already captured in this worker, replayed "
                                    "without capturing again", 0.0, saving, replay)
    if saving > capture:
        return GraphsDecision("on", f"auto on ZeroGPU: capturing {_shapes(shapes)} (~{capture:.0f} ms) pays for "
                                    f"itself, replays save ~{saving:.0f} ms", capture, saving, replay)
    return GraphsDecision("off", f"auto on ZeroGPU: capturing {_shapes(shapes)} (~{capture:.0f} ms) costs more than "
                                 f"replays would save (~{saving:.0f} ms) on this short race: eager", 0.0, 0.0, replay)


def _shapes(n: int) -> str:
    return f"{n} shape" + ("" if n == 1 else "s")


def graphs_captured(model, methods) -> bool:
    """Whether graphs for every one of `methods` are captured already on `model` in this process (the
    sessions `engine.static.checkout` keeps on the model: a reused ZeroGPU worker still has them)."""
    from .engine.model_state import found_state

    state = found_state(model)
    sessions = state.graph_sessions if state is not None else {}
    # A runner's captured graphs, by shape key (`engine.graphs.GraphRunner`): any one means this method's
    # shapes were captured in this process (its fixed shapes are all captured in a first race).
    have = {method for (method, _capacity, capture), kept in sessions.items()
            if capture and any(getattr(session.runner, "_graphs", None) for session in kept)}
    return bool(methods) and all(m in have for m in methods)


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


def _number(env: Mapping[str, str], name: str, default: float, cast=int, minimum: float = 0, strict=True):
    """`env[name]` as a number above `minimum` (at or above it when not `strict`), else `default`."""
    value = env.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = cast(value)
    except ValueError:
        raise InvalidInput(f"environment variable {name} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < minimum or (strict and number == minimum):
        bound = "positive" if (strict and minimum == 0) else f"at least {minimum:g}"
        raise InvalidInput(f"environment variable {name} must be {bound}, got {value!r}")
    return number


def is_public(host: str | None, share: bool) -> bool:
    """Whether a server on `host` (with a --share link or not) can be reached by strangers."""
    return bool(share) or (host or "127.0.0.1").strip().lower() not in LOOPBACK_HOSTS


def hosted_by_env(env: Mapping[str, str]) -> bool:
    """What the environment alone says: SPECVIZ_HOSTED, else whether this is a Space."""
    return _flag(env, "SPECVIZ_HOSTED", bool(env.get("SPACE_ID")))


def hosted_for_launch(host: str | None, share: bool, env: Mapping[str, str] | None = None) -> bool:
    """Whether a server launched on `host` / `share` runs the hosted limits: SPECVIZ_HOSTED when the operator
    set it (1 or 0: by name, either way), else on a Space, else whenever the server is public."""
    env = os.environ if env is None else env
    if (env.get("SPECVIZ_HOSTED") or "").strip():
        return _flag(env, "SPECVIZ_HOSTED", False)
    return bool(env.get("SPACE_ID")) or is_public(host, share)


@dataclass(frozen=True)
class HostingLimits:
    hosted: bool = False
    allow_custom_models: bool = True
    allowed_models: tuple[str, ...] = PRESET_MODEL_IDS
    max_new_tokens: int = 1024
    max_prompt_chars: int = 20_000
    max_run_seconds: float = 900.0
    queue_size: int = 16
    # Races in flight at once: ZEROGPU_CONCURRENCY on ZeroGPU (a device per call), else 1 (one device,
    # which parallel races would share, making their speeds unfair to compare) unless SPECVIZ_CONCURRENCY.
    race_concurrency: int = 1
    zerogpu: bool = False
    max_trace_bytes: int = 64 * 1024 * 1024
    # Places one client may hold in the race queue (`ui.places`); None: no per-client limit (a local server,
    # whose one visitor is its operator).
    places_per_address: int | None = None
    places_per_user: int | None = None
    trusted_proxies: int = 0
    worker_grace_s: float = WORKER_GRACE_S   # past a race's deadline, before its worker is killed
    allowed_models_explicit: bool = False   # SPECVIZ_ALLOWED_MODELS was set: it binds custom ids too
    hub_token: bool = False                  # HF_TOKEN is set: gated models (GATED_MODEL_IDS) may load

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> "HostingLimits":
        env = os.environ if env is None else env
        hosted = hosted_by_env(env)
        allowed = tuple(m.strip() for m in env.get("SPECVIZ_ALLOWED_MODELS", "").split(",") if m.strip())
        zerogpu = on_zerogpu(env)
        return HostingLimits(
            hosted=hosted,
            allow_custom_models=_flag(env, "SPECVIZ_ALLOW_CUSTOM_MODELS", not hosted),
            allowed_models=allowed or PRESET_MODEL_IDS,
            allowed_models_explicit=bool(allowed),
            hub_token=hub_token_available(None if env is os.environ else env),
            max_new_tokens=_number(env, "SPECVIZ_MAX_NEW_TOKENS", 256 if hosted else 1024),
            max_prompt_chars=_number(env, "SPECVIZ_MAX_PROMPT_CHARS", 4000 if hosted else 20_000),
            max_run_seconds=_number(env, "SPECVIZ_MAX_RUN_SECONDS", 120.0 if hosted else 900.0, float),
            queue_size=_number(env, "SPECVIZ_QUEUE_SIZE", HOSTED_QUEUE_SIZE if hosted else 16),
            race_concurrency=_number(env, "SPECVIZ_CONCURRENCY", ZEROGPU_CONCURRENCY if zerogpu else 1),
            zerogpu=zerogpu,
            max_trace_bytes=_number(env, "SPECVIZ_MAX_TRACE_MB", 16 if hosted else 64) * 1024 * 1024,
            places_per_address=_number(env, "SPECVIZ_PLACES_PER_ADDRESS", HOSTED_PLACES_PER_ADDRESS if hosted else None),
            places_per_user=_number(env, "SPECVIZ_PLACES_PER_USER", HOSTED_PLACES_PER_USER if hosted else None),
            trusted_proxies=_number(env, "SPECVIZ_TRUSTED_PROXIES", SPACE_TRUSTED_PROXIES if env.get("SPACE_ID") else 0,
                                    strict=False),
            worker_grace_s=_number(env, "SPECVIZ_WORKER_GRACE_S", WORKER_GRACE_S, float),
        )

    def shared_device_note(self) -> str:
        """What the page says when parallel races share this server's one device (CPU, or a dedicated GPU):
        each race's speed then depends on how many others run beside it. Empty where races do not share."""
        if self.race_concurrency <= 1 or self.zerogpu:
            return ""
        return (f" Up to {self.race_concurrency} races run at once on this server's one device: speeds are shared "
                "between them, so compare methods within one race, not across races.")

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

"""Serving the app: what a Space's `app.py` and the `specviz app` command both run.

On ZeroGPU, and only there (the platform sets SPACES_ZERO_GPU; every Gradio Space has the `spaces`
package, which is inert elsewhere), the race generator runs under `spaces.GPU` the way the Hub's
documentation asks: the preset pairs are loaded onto `cuda` when the app starts (outside a call ZeroGPU
emulates CUDA, and transfers placed at start-up are the fast ones), and each race asks for the seconds
it needs, computed from the request. A dedicated GPU Space (a T4) or a CPU Space takes the ordinary
path: a decoding worker process and the device torch finds.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping

from .hosting import (
    GraphsDecision,
    HostingLimits,
    graphs_captured,
    on_zerogpu,
    zerogpu_duration,
    zerogpu_graphs,
    zerogpu_race_seconds,
)
from .methods import sized


class ZeroGpu:
    """ZeroGPU's `spaces.GPU` around the race generator, asking per race for what that race needs.

    `build_demo` wraps its generator with this (`__call__`) and fits each race's run limit inside
    `seconds(request)`. The seconds come from the request (methods, new tokens, whether an `auto` size
    still has to be measured on this GPU) and this GPU's t(1) once a race has measured it, at most `cap`
    (SPECVIZ_ZEROGPU_DURATION); the race's own clock stops it ZEROGPU_SETUP_S before that, with its
    tokens kept (`HostingLimits.within_gpu_call`). The seconds include graph capture where
    `graphs_decision` (`hosting.zerogpu_graphs`) will capture.
    """

    def __init__(self, spaces, pairs, cap: float):
        self.spaces = spaces
        self.pairs = pairs
        self.cap = cap

    def __call__(self, compute):
        # ZeroGPU calls `duration` with the generator's own arguments: (control, request).
        return self.spaces.GPU(duration=lambda control, request: self.seconds(request))(compute)

    def seconds(self, request) -> int:
        """Seconds for one race of a validated `specviz.request.RaceRequest`."""
        options = request.method_options()
        auto = any(all(v is None for k, v in options[m].items() if k not in ("tree", "pool_from_prompt"))
                   for m in options if m in sized())
        target, draft = request.models()
        pair = self.pairs.loaded(target, draft, request.dtype or "auto")
        # This GPU's t(1) once a race here has measured it; None: an `auto` size still has to be measured.
        forward_ms = target_t1(pair, False) if pair is not None else None
        # Outside the GPU call nothing is captured (graphs live in the worker): capture is counted in.
        graphs = self.graphs_decision(pair, request) if pair is not None else zerogpu_graphs(
            request.graphs, request.methods, int(request.max_new_tokens))
        return zerogpu_race_seconds(request.methods, int(request.max_new_tokens), forward_ms=forward_ms,
                                    sizing=auto and forward_ms is None, cap=self.cap, graphs=graphs)

    def graphs_decision(self, pair, request) -> GraphsDecision:
        """Graphs for this race on ZeroGPU (`hosting.zerogpu_graphs`), from this GPU's measured forwards
        where a race has measured them and whether this worker holds the methods' graphs already. Off a
        GPU (ZeroGPU emulating CUDA outside a call, or a test) nothing is captured: the setting stands."""
        if pair.device.type != "cuda":
            from .runtime.race import graphs_reason

            return GraphsDecision(request.graphs, graphs_reason(request.graphs, pair.device))
        return zerogpu_graphs(request.graphs, request.methods, int(request.max_new_tokens),
                              eager_ms=target_t1(pair, False), replay_ms=target_t1(pair, True),
                              captured=graphs_captured(pair.target, request.methods))


def target_t1(pair, graphs: bool) -> float | None:
    """The target's cached t(1) on this device (eager, or replayed with `graphs`), else None: the curve every
    method's sizing measures (`profiler.curve_key`)."""
    from .engine.profiler import cached_forward_curve, curve_key

    curve = cached_forward_curve(pair.target, curve_key(pair, "target"), graphs=graphs)
    return curve.get(1) if curve else None


def preload_pairs(pairs, limits: HostingLimits) -> None:
    """Load every preset pair this deployment serves (gated ones only with a token) now. A pair that
    fails to load is reported and left to load when a race asks for it: the app still starts."""
    from .request import PRESETS, allowed_presets

    for label in allowed_presets(limits):
        try:
            pairs.get(*PRESETS[label], "auto")
        except Exception as exc:   # the Hub unreachable at start-up, say: the page says so on first use
            print(f"specviz: could not preload {label}: {exc}", file=sys.stderr)


def make_demo(env: Mapping[str, str] | None = None):
    """The app for this host: under ZeroGPU with its hooks, elsewhere as it runs locally."""
    spaces = None
    if on_zerogpu(env):
        import spaces   # only there, and before anything in SpecViz touches CUDA (`spaces` must patch torch first)
    from .runtime.race import PairCache
    from .ui import build_demo

    if spaces is None:
        return build_demo()
    import torch

    from .request import PRESETS

    limits = HostingLimits.from_env(env)
    # Every preset stays loaded (one pair more for a custom id or another precision), on `cuda`
    # (emulated by ZeroGPU outside a call; a machine with no GPU at all keeps torch's own choice).
    pairs = PairCache(max_pairs=len(PRESETS) + 1, device="cuda" if torch.cuda.is_available() else None)
    preload_pairs(pairs, limits)
    return build_demo(gpu=ZeroGpu(spaces, pairs, cap=zerogpu_duration(env)), pairs=pairs)


def choose_hosted(host: str | None, share: bool, hosted: bool | None = None, env=None) -> bool:
    """Settle whether this launch runs the hosted limits, and record it in SPECVIZ_HOSTED (what the app
    reads when it is built). `hosted` True or False is the operator's word by name; None: the public rule
    (`hosting.hosted_for_launch`: a Space, a --share link or a non-loopback host is public)."""
    from .hosting import hosted_by_env, hosted_for_launch

    env = os.environ if env is None else env
    chosen = hosted_for_launch(host, share, env) if hosted is None else hosted
    if chosen != hosted_by_env(env):   # written only when the environment alone would decide otherwise
        env["SPECVIZ_HOSTED"] = "1" if chosen else "0"
    return chosen


def serve(host: str = "127.0.0.1", port: int = 7860, share: bool = False, hosted: bool | None = None) -> None:
    """Build the app and serve it until interrupted; `hosted` switches the hosted limits on or off (None:
    on when the server is public, `choose_hosted`)."""
    from .runtime.worker import keep_server_off
    from .ui import launch_kwargs

    choose_hosted(host, share, hosted)
    demo = make_demo()
    keep_server_off(demo.specviz_worker_slot)
    demo.launch(server_name=host, server_port=port, share=share, **launch_kwargs())

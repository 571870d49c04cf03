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
from typing import Mapping

from .hosting import HostingLimits, on_zerogpu, zerogpu_duration, zerogpu_race_seconds


def zerogpu_spaces(env: Mapping[str, str] | None = None):
    """The `spaces` module on ZeroGPU, else None. Imported only there, and before anything in SpecViz
    touches CUDA (`spaces` must patch torch first)."""
    if not on_zerogpu(env):
        return None
    import spaces

    return spaces


class ZeroGpu:
    """ZeroGPU's `spaces.GPU` around the race generator, asking per race for what that race needs.

    `pairs` holds the pairs loaded at start-up; a race's seconds come from its request (methods, new
    tokens, whether an `auto` size still has to be measured) and this GPU's measured t(1) once a race
    has measured it, at most `cap` (SPECVIZ_ZEROGPU_DURATION). The race's own clock stops it
    ZEROGPU_SETUP_S before that, with its tokens kept (`HostingLimits.within_gpu_call`).
    """

    def __init__(self, spaces, pairs, cap: float):
        self.spaces = spaces
        self.pairs = pairs
        self.cap = cap

    def wrap(self, compute, request_of):
        """`compute` under `spaces.GPU`, with a dynamic duration: ZeroGPU calls `duration` with the
        generator's own arguments, and `request_of(*args)` finds the race request among them."""
        return self.spaces.GPU(duration=lambda *args, **kwargs: self.seconds(request_of(*args, **kwargs)))(compute)

    def seconds(self, request) -> int:
        methods = list(request["methods"])
        forward_ms, measured = self.measured_forward_ms(request)
        options = request.get("options") or {}
        auto = any(m in ("sequoia", "lookahead") and all(
            v is None for k, v in options.get(m, {}).items() if k != "pool_from_prompt") for m in methods)
        return zerogpu_race_seconds(methods, int(request["max_new_tokens"]), forward_ms=forward_ms,
                                    sizing=auto and not measured, cap=self.cap)

    def measured_forward_ms(self, request) -> tuple[float | None, bool]:
        """This GPU's t(1) for the request's target when a race here has measured it (else None), and
        whether it has: a loaded pair whose curve is cached needs no sizing run."""
        from .engine.profiler import cached_forward_curve

        pair = self.pairs.loaded(request["target"], request.get("draft"), request.get("dtype") or "auto")
        if pair is None:
            return None, False
        curve = cached_forward_curve(pair.target, pair.key + ":target")
        return (curve[1], True) if curve else (None, False)


def preload_pairs(pairs, limits: HostingLimits) -> list[tuple]:
    """Load every preset pair this deployment serves (gated ones need a token) now, onto the GPU."""
    from .ui.layout import PRESETS, allowed_presets

    loaded = []
    for label in allowed_presets(limits):
        target, draft = PRESETS[label]
        pairs.get(target, draft, "auto")
        loaded.append((target, draft))
    return loaded


def make_demo(env: Mapping[str, str] | None = None):
    """The app for this host: under ZeroGPU with its hooks, elsewhere as it runs locally."""
    spaces = zerogpu_spaces(env)
    from .engine.race import PairCache
    from .ui import build_demo

    if spaces is None:
        return build_demo()
    limits = HostingLimits.from_env(env)
    from .ui.layout import PRESETS

    # Every preset stays loaded (one pair more for a custom id or another precision), on `cuda`.
    pairs = PairCache(max_pairs=len(PRESETS) + 1, device="cuda")
    preload_pairs(pairs, limits)
    return build_demo(gpu=ZeroGpu(spaces, pairs, cap=zerogpu_duration(env)), pairs=pairs)


def serve(host: str = "127.0.0.1", port: int = 7860, share: bool = False, hosted: bool | None = None) -> None:
    """Build the app and serve it until interrupted; `hosted` switches the hosted limits on or off."""
    from .ui import launch_kwargs

    if hosted is not None:
        os.environ["SPECVIZ_HOSTED"] = "1" if hosted else "0"
    make_demo().launch(server_name=host, server_port=port, share=share, **launch_kwargs())

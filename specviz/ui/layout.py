"""The Gradio app: controls, three racing columns, tree / pool / latency views, replay, hardware panel.

Built in three parts: `controls` (the components, by name), `handlers` (what each event does) and `wiring`
(which event runs which handler, and the HTTP API's `/race`, see `api`). Per-visitor state is only the
`RaceTrace` in a `gr.State`; loaded model pairs are shared read-only through a small cache.
"""

from __future__ import annotations

import atexit
import sys
from dataclasses import replace

import gradio as gr

from ..runtime.race import PairCache
from ..runtime.worker import WorkerSlot
from ..errors import SpecVizError
# The names the app's callers and tests know it by (the tables themselves live with the request).
from ..request import CUSTOM, DEFAULT_PRESET, FEATURE_PRESET, METHOD_NAMES, PRESETS, RaceRequest  # noqa: F401
from ..request import allowed_presets
from .content import EXAMPLES, SIZING_CHOICES, TREE_CHOICES, WORKSHOP, page_files  # noqa: F401
from .controls import build_page
from .handlers import PageHandlers
from .racing import Racer, prune_session_config, race_events, switched_on  # noqa: F401
from .places import PlacesPolicy, guard_queue
from .wiring import wire

def hosting_limits():
    """The deployment's limits (env vars, see specviz.hosting): custom ids, caps, queue size."""
    from ..hosting import HostingLimits

    return HostingLimits.from_env()


def initial_request(defaults: dict | None, limits, presets: list[str]) -> RaceRequest:
    """The page's initial values: the request's defaults, then `defaults` (by `RaceRequest`'s names), on a pair
    this server offers."""
    given = dict(defaults or {})
    if "methods" in given:
        given["methods"] = tuple(given["methods"])
    init = replace(RaceRequest(), **given)
    if init.model not in presets and presets:
        init = replace(init, model=presets[0])
    return replace(init, max_new_tokens=min(init.max_new_tokens, limits.max_new_tokens))


def build_demo(gpu=None, defaults: dict | None = None, worker: bool | None = None,
               pairs: PairCache | None = None, warm_up: bool | None = None) -> gr.Blocks:
    """The app. `gpu` wraps the compute generator (ZeroGPU's `spaces.GPU`) when given; when it also has
    `seconds(request)` (`specviz.serve.ZeroGpu`), each race's run limit fits the seconds it asked for. `defaults`
    overrides the controls' initial values and the HTTP API's defaults alike (tests pin small explicit sizes);
    `worker` decodes in a worker process (default: yes, except under ZeroGPU or SPECVIZ_WORKER=0); `pairs` are
    model pairs loaded beforehand (ZeroGPU's, placed on the GPU at start-up); `warm_up`: the worker starts at once
    and measures what the initial race's `auto` sizes need (default: yes, with a worker, unless SPECVIZ_WARMUP=0),
    and the page shows its progress."""
    pairs = PairCache() if pairs is None else pairs
    limits = hosting_limits()
    seconds_for = getattr(gpu, "seconds", None)
    graphs_policy = getattr(gpu, "graphs_decision", None)   # ZeroGPU: whether capture pays for this race

    def compute(control, request):
        # A closure, so ZeroGPU pickles only the request and the yields, never the model cache.
        race_limits = limits if seconds_for is None else limits.within_gpu_call(seconds_for(request))
        yield from race_events(pairs, race_limits, control, request, graphs_policy)

    if gpu is not None:
        compute = gpu(compute)
    if worker is None:
        worker = gpu is None and switched_on("SPECVIZ_WORKER")
    # ZeroGPU hands the race a GPU inside the process `spaces.GPU` runs it in: no worker there.
    slot = WorkerSlot() if worker else None
    if slot is not None:
        atexit.register(slot.close)
    presets = allowed_presets(limits)
    init = initial_request(defaults, limits, presets)

    # delete_cache: Gradio's copies of served files (traces, uploads) older than an hour go, hourly.
    with gr.Blocks(title="SpecViz: speculative decoding, side by side", analytics_enabled=False,
                   delete_cache=(3600, 3600)) as demo:
        page = build_page(init, limits, presets)
        warm = slot is not None and (switched_on("SPECVIZ_WARMUP") if warm_up is None else warm_up)
        page.measure_timer.active = warm
        racer = Racer(pairs, limits, slot, compute)
        handlers = PageHandlers(page, racer, presets=presets)
        handlers.demo = demo
        wire(page, handlers, init)

    demo.queue(max_size=limits.queue_size, default_concurrency_limit=1)
    if limits.places_per_address or limits.places_per_user:   # a hosted server: places counted per client
        guard_queue(demo, PlacesPolicy(per_address=limits.places_per_address or limits.queue_size,
                                       per_user=limits.places_per_user or limits.queue_size,
                                       trusted_proxies=limits.trusted_proxies))
    if warm:
        try:
            slot.warm_up(init.validated(limits))
        except SpecVizError as exc:   # odd defaults: the page says so on Start; nothing to measure for them
            print(f"specviz: no warm-up measurement ({exc})", file=sys.stderr)
    demo.specviz_worker_slot = slot   # for the tests and for whoever embeds the app: None = in-process
    demo.specviz_pairs = pairs
    if slot is not None:
        close_server = demo.close

        def close(*args, **kwargs):   # the workers end with the app, not only at interpreter exit
            racer.close()
            return close_server(*args, **kwargs)

        demo.close = close
    return demo


def launch_kwargs() -> dict:
    """What `launch()` needs besides host and port (Gradio 6 takes css/theme there); a hosted server also
    caps uploads at its trace limit, so Gradio refuses a larger file while it arrives, before it lands."""
    # System fonts only: no font download (workshop laptops and CI are often offline).
    sans = ["Inter", "ui-sans-serif", "system-ui", "Segoe UI", "Arial", "sans-serif"]
    mono = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"]
    limits = hosting_limits()
    uploads = {"max_file_size": limits.max_trace_bytes} if limits.hosted else {}   # a trace is the largest upload
    return {**page_files(), "theme": gr.themes.Soft(font=sans, font_mono=mono), **uploads}


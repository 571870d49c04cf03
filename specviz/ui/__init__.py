"""The SpecViz app's views: pure trace -> figure/HTML functions and the Gradio layout.

`figures`, `html`, `views` and `hardware` need no model and no gradio; `build_demo`
(in `layout`) is imported lazily so the pure views load without gradio.
"""

from __future__ import annotations


def build_demo(gpu=None, defaults: dict | None = None, worker: bool | None = None,
               gpu_duration: float | None = None, pairs=None, warm_up: bool | None = None):
    from .layout import build_demo as _build

    return _build(gpu, defaults, worker, gpu_duration, pairs, warm_up)


def launch_kwargs() -> dict:
    from .layout import launch_kwargs as _kwargs

    return _kwargs()

"""The SpecViz app's views: pure trace -> figure/HTML functions and the Gradio layout.

`figures`, `html`, `views` and `hardware` need no model and no gradio; `build_demo` and `launch_kwargs`
(in `layout`) are imported on first use so the pure views load without gradio.
"""

from __future__ import annotations


def __getattr__(name: str):
    if name in ("build_demo", "launch_kwargs"):
        from . import layout

        return getattr(layout, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

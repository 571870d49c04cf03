"""Which event of which component runs which handler, and which endpoints the HTTP API lists.

Public endpoints: `/race` (one race as JSON, see `api`), and the page's own events: `/race_stream` (the Start
button's streaming race, whose outputs are the page's components), `/stop`, `/show_step`, `/prev`, `/next`,
`/load_trace`. Everything else (what-if, workshop, examples) is private to the page.
"""

from __future__ import annotations

import os

import gradio as gr

from ..request import CUSTOM, RaceRequest
from .api import RaceApi, takes_race_settings
from .content import EXAMPLES
from .controls import Page
from .handlers import PRESET_SETTINGS, WHATIF_SIZES, PageHandlers


def wire(page: Page, handlers: PageHandlers, defaults: RaceRequest) -> None:
    """Connect every event of the page, and add the `/race` endpoint."""
    outputs = page.race_outputs.components
    # Races in flight at once (`HostingLimits.race_concurrency`): several on ZeroGPU, where each gets a GPU of
    # its own, else one. The page's race and `/race` share the one queue.
    races = dict(concurrency_limit=handlers.limits.race_concurrency, concurrency_id="race")
    # Progress only on the status line, "minimal": a waiting visitor reads Gradio's "queue: 3/20 | 4/51.2s"
    # there (their place, and the wait it expects from the races ahead at their average length). Gradio's
    # default animates a spinner and a timer on every output for the whole race, which alone kept a
    # same-machine browser's renderer busy; SPECVIZ_PROGRESS=hidden shows nothing, =full the overlay.
    run_event = page.run_btn.click(
        takes_race_settings(handlers.race, stream=True), page.race_inputs(), outputs, api_name="race_stream",
        api_description="The page's own race: streams the page's components (texts, views, status). "
                        "For one race as one JSON result, call /race.", **races,
        show_progress=os.environ.get("SPECVIZ_PROGRESS", "minimal"), show_progress_on=[page.status])
    page.stop_btn.click(handlers.stop, [page.trace], outputs, cancels=[run_event], api_name="stop", queue=False)
    _wire_measuring(page, handlers, run_event)
    stepping = [page.trace, page.step_slider]
    page.step_slider.release(handlers.show_step, stepping, outputs, api_name="show_step", show_progress="hidden")
    # Not queued: stepping (also by the arrow keys) answers at once, even while another race runs.
    page.prev_btn.click(handlers.previous, stepping, outputs, api_name="prev", show_progress="hidden", queue=False)
    page.next_btn.click(handlers.next, stepping, outputs, api_name="next", show_progress="hidden", queue=False)
    load_event = page.upload.upload(handlers.load_trace, [page.upload], outputs, api_name="load_trace")
    _wire_whatif(page, handlers, (run_event, load_event))
    _wire_workshop(page, handlers)
    _wire_presenter(page, handlers)
    # The same queue as the page's race, whoever asks.
    gr.api(RaceApi(handlers, served_by=page.trace_file).endpoint(defaults), api_name="race", **races)


def _wire_measuring(page: Page, handlers: PageHandlers, run_event) -> None:
    """The measuring bar: polled once a second while the worker measures this machine (not queued, so it
    never waits behind a race); a race that ran on first sizes starts the polling again."""
    stats = [page.stats[m] for m in page.stats]
    page.measure_timer.tick(handlers.measurement, [page.trace], [page.measuring, *stats, page.measure_timer],
                            queue=False, show_progress="hidden", api_visibility="private")
    run_event.then(lambda: gr.Timer(active=True), None, page.measure_timer, queue=False, show_progress="hidden",
                   api_visibility="private")


def _wire_whatif(page: Page, handlers: PageHandlers, new_trace_events) -> None:
    """Workshop mode: the what-if panel follows the sliders, an uploaded profile and each new trace."""
    sliders = [page.wi_sliders[name] for name in WHATIF_SIZES]
    inputs = [page.trace, *sliders, page.profile]
    private = dict(api_visibility="private", queue=False)
    for event in new_trace_events:
        event.then(handlers.sync_sliders, [page.trace], sliders, **private).then(
            handlers.what_if, inputs, page.whatif_html, **private)
    for slider in sliders:
        slider.release(handlers.what_if, inputs, page.whatif_html, show_progress="hidden", **private)
    for listener in (page.wi_profile.upload, page.wi_profile.clear):
        listener(handlers.load_profile, [page.wi_profile], [page.profile, page.wi_note],
                 api_visibility="private").then(handlers.what_if, inputs, page.whatif_html, **private)


def presenter_wanted(request: gr.Request | None) -> bool:
    """Whether the page's address asks for the presenter view (`?presenter=1`, or true / yes / on)."""
    params = getattr(request, "query_params", None) or {}
    return str(params.get("presenter", "")).strip().lower() in ("1", "true", "yes", "on")


def _wire_presenter(page: Page, handlers: PageHandlers) -> None:
    """The presenter box shows what the address asked for. The page's script (`static/page.js`) has already
    switched the view from the same address, so a projector never shows the small page first; it also follows
    the box when it is clicked. Not queued: the box must not wait behind a race."""
    if handlers.demo is not None:
        handlers.demo.load(presenter_wanted, None, page.presenter, queue=False, show_progress="hidden",
                           api_visibility="private")


def _wire_workshop(page: Page, handlers: PageHandlers) -> None:
    set_by_preset = [getattr(page, name) for name in PRESET_SETTINGS] + [page.question, page.presenter_question]
    private = dict(api_visibility="private", queue=False)
    page.workshop.change(handlers.apply_workshop, [page.workshop, page.model], set_by_preset, **private)
    for button, text in zip(page.example_buttons, EXAMPLES.values()):
        button.click(lambda t=text: t, None, page.prompt, **private)
    page.model.change(lambda p: gr.Row(visible=p == CUSTOM), page.model, page.custom_row, **private)

"""What the page's events do: race, stop, step through, replay, what-if, workshop presets.

`PageHandlers` holds the app's shared parts (the `Racer`, the session controls, the
trace files) and answers each event with values by output name (`controls.Outputs`);
`wiring` connects its methods to the components. No gradio component is built here.
"""

from __future__ import annotations

import time
from contextlib import closing, contextmanager
from functools import cached_property

import gradio as gr

from ..runtime.race import release_freed_memory
from ..errors import SpecVizError
from ..methods import sized, whatifs
from ..request import DEFAULT_PRESET, FEATURE_PRESET, ILLUSTRATIVE_LOOKAHEAD, ILLUSTRATIVE_TREE, INDEPENDENT_PRESET
from ..request import RaceRequest
from ..trace import RaceTrace
from . import hardware, html, narrate, views, whatif
from .content import LIVE_VIEW_INTERVAL_S, TEXT_INTERVAL_S, WORKSHOP
from .controls import STEP_OUTPUTS, Page
from .places import session_connected
from .racing import RaceControl, Racer, TraceFiles, Visitors, contention_note, prune_session_config
from .views import COLUMNS, DEFAULT_COLUMNS

WHATIF_SIZES = tuple(whatif.sliders())   # the what-if sliders, each sized method's (`Method.whatif`)


@contextmanager
def upload_errors(what: str, failed: str | None = None):
    """Any exception from reading an uploaded `what` (a trace, a profile) as one `gr.Error` in SpecViz's words,
    never Gradio's generic failure. The message is escaped: the page renders it as HTML, and it may quote the
    upload."""
    try:
        yield
    except SpecVizError as exc:
        message = str(exc)
    except OSError as exc:
        message = f"could not read the uploaded file: {exc}"
    except Exception as exc:   # the last resort: a check missed something, the visitor still gets words
        message = f"{failed or f'could not read this {what}'}: {type(exc).__name__}: {str(exc)[:200]}"
    else:
        return
    raise gr.Error(html.esc(message, quote=False), print_exception=False) from None


def session_of(request: gr.Request | None) -> str:
    """The Gradio session a call belongs to; "local" for a call without one (a script calling a handler)."""
    return getattr(request, "session_hash", None) or "local"


class PageHandlers:
    """The page's event handlers, sharing one app's racer, sessions' controls and trace files."""

    def __init__(self, page: Page, racer: Racer, presets: list[str]):
        self.page = page
        self.outputs = page.race_outputs
        self.racer = racer
        self.limits = racer.limits
        self.controls: dict[str, RaceControl] = {}   # session hash -> its running race's control
        self.visitors = Visitors()                    # sessions with a race in flight (one each)
        self.trace_files = TraceFiles()
        self.presets = presets
        self.demo: gr.Blocks | None = None   # set once the Blocks exist (sessions' state lives there)

    @cached_property
    def q4_here(self) -> bool:
        """Whether q4 races here (a CPU with a 4-bit kernel): asked once, when a preset is first picked."""
        from ..engine.models import q4_runs_here

        return q4_runs_here()

    # -- the views -------------------------------------------------------------------------------

    def full_view(self, trace: RaceTrace | None, upto: int | None = None, status_text: str | None = None,
                  with_file: bool = True) -> dict:
        """Every output's value at step `upto` of `trace` (None: its end), by output name."""
        total = len(trace.order) if trace else 0
        upto = total if upto is None else max(0, min(int(upto), total))
        curve, hw = hardware.panel(trace)
        values = {**views.text_views(trace, upto), **views.plot_views(trace, upto),
                  "summary": html.summary_html(trace, trace.steps_done(upto)) + hardware.auto_notes_html(trace)
                  if trace else "", "trace": trace,
                  "slider": gr.Slider(minimum=0, maximum=max(total, 1), value=upto, step=1),
                  "caption": narrate.caption_html(trace, upto),
                  "file": self.trace_files.write(trace) if (trace and with_file) else None,
                  "hw_html": hw, "hw_plot": curve}
        if status_text is not None:
            values["status"] = status_text
        return values

    # -- the race ----------------------------------------------------------------------------------

    def race(self, settings: dict, request: gr.Request | None = None):
        """The Start race button: stream the race's texts and views, then its full view. `settings`: the
        19 race settings by name (see `api.takes_race_settings`)."""
        session = session_of(request)
        if not self.begin_race(session):
            yield self.outputs.pack(status=f"⚠ {Visitors.ONE_RACE}")
            raise gr.Error(Visitors.ONE_RACE, print_exception=False)
        prune_session_config(self.demo, session)   # what the last run's final view left behind
        control = self._register(session)
        trace, failure = None, None
        latest: list[RaceTrace] = []   # the race so far, for the caption of a race that fails midway
        try:
            race_request = RaceRequest.from_values(**settings).validated(self.limits)
            trace = yield from self._stream(race_request, control, latest)
        except Exception as exc:
            failure = self.racer.failure(exc)
            trace = latest[-1] if latest else None
        finally:
            prune_session_config(self.demo, session)   # this run's streamed (skipped) figures
            release_freed_memory()
            self._unregister(session, control)
        if control.stop.is_set():
            return   # Stop has rendered the final view; a late update must not overwrite it
        if failure is not None:
            # The status line says it too: a "Loading …" line must not outlive the load that failed, nor
            # the caption a race that never finished.
            yield self.outputs.pack(status=f"⚠ {failure}",
                                    caption=narrate.caption_html(trace, len(trace.order)) if trace is not None else "")
            raise gr.Error(failure, print_exception=False)
        if trace is not None:
            message = ("Stopped early (this server's time limit per run)." if trace.cancelled else
                       "Done. Scrub the replay below or download the trace.")
            yield self.outputs.pack(**self.full_view(
                trace, status_text=message + contention_note(trace) + self.limits.shared_device_note()))

    def begin_race(self, session: str) -> bool:
        """Whether this session may start a race now (one in flight each). Locally a call without a Gradio
        session (a script calling the handler itself) is not counted; a hosted server exempts nobody."""
        return (session == "local" and not self.limits.hosted) or self.visitors.begin(session)

    def _register(self, session: str) -> RaceControl:
        """The session's control for Stop. Every host has one: its stop flag crosses ZeroGPU's process
        boundary (`racing.StopFlag`), so Stop ends a race there too."""
        control = RaceControl()
        self.controls[session] = control
        return control

    def _unregister(self, session: str, control: RaceControl) -> None:
        if self.controls.get(session) is control:
            self.controls.pop(session, None)
        control.release()
        self.visitors.end(session)

    def client_gone(self, request: gr.Request | None) -> bool:
        """Whether the client of this call has disconnected (Gradio let go of its event): its race should end."""
        queue = getattr(self.demo, "_queue", None)
        session = getattr(request, "session_hash", None)
        return queue is not None and session is not None and not session_connected(queue, session)

    def _stream(self, request: RaceRequest, control: RaceControl, latest: list):
        """Yield the page's updates while the race runs: texts always, the views when their (slower) turn has
        come; return its final trace (None if stopped)."""
        last_text = last_plot = 0.0
        captioned, trace = False, None
        with closing(self.racer.events(request, control)) as events:   # closed at once, also on Stop
            for event in events:
                if control.stop.is_set():
                    return None   # Stop has rendered the final view; a late yield must not overwrite it
                if event[0] == "status":
                    yield self.outputs.pack(status=event[1])
                    continue
                _, trace, done = event
                latest[:] = [trace]
                if done:
                    return trace
                now = time.monotonic()
                if now - last_text < TEXT_INTERVAL_S:
                    continue   # the next update carries these tokens too
                last_text = now
                values = {**views.text_views(trace, None, running=True), "trace": trace}   # Stop and replay see it
                if now - last_plot >= LIVE_VIEW_INTERVAL_S:
                    last_plot = now
                    values.update(views.plot_views(trace, live=True))
                if not captioned:   # the step-through waits for the race; say so once, not per update
                    captioned = True
                    values["caption"] = narrate.racing_caption_html()
                yield self.outputs.pack(**values)
        return trace

    def measurement(self, trace):
        """The measuring bar, once a second while the worker measures this machine; before any race the
        Sequoia and Lookahead columns say they wait for it. The timer stops when nothing is left to measure
        (a race that ran on first sizes starts it again)."""
        progress = self.racer.measurement()
        waiting = progress is not None and trace is None
        stats = {m: (html.stats_html(m, None, waiting=waiting and m in sized(), raced=m in DEFAULT_COLUMNS)
                     if trace is None else gr.skip()) for m in COLUMNS}
        return [html.measuring_html(progress), *stats.values(), gr.Timer(active=progress is not None)]

    def stop(self, trace, request: gr.Request | None = None):
        control = self.controls.pop(session_of(request), None)
        if control is not None:
            control.close()
        if trace is None:
            return self.outputs.pack(status="Stopped.")
        return self.outputs.pack(**self.full_view(trace, status_text="Stopped. The run so far is kept for replay."))

    # -- stepping and replay -------------------------------------------------------------------------

    def show_step(self, trace, upto):
        if trace is None:
            return self.outputs.pack()
        # Only the step-dependent views change; the state, file, hardware panel and status stay.
        values = self.full_view(trace, upto, with_file=False)
        return self.outputs.pack(**{name: values[name] for name in STEP_OUTPUTS})

    def previous(self, trace, upto):
        return self.show_step(trace, int(upto or 0) - 1)   # full_view keeps a step within the race

    def next(self, trace, upto):
        return self.show_step(trace, int(upto or 0) + 1)

    def load_trace(self, path):
        if not path:
            return self.outputs.pack()
        with upload_errors("trace"):
            trace = RaceTrace.from_file(path, max_bytes=self.limits.max_trace_bytes)
        # A trace that passed every check should draw; one that still trips a view is refused in words too.
        with upload_errors("trace", "could not show this trace"):
            view = self.full_view(trace, with_file=False, status_text=(
                f"Replaying an uploaded trace: {len(trace.order)} steps, {', '.join(trace.methods)} on "
                f"{html.esc(trace.target_name or 'unknown model')}."))
        return self.outputs.pack(**view)

    # -- workshop mode -------------------------------------------------------------------------------

    @staticmethod
    def what_if(trace, *sizes_and_profile):
        """The panel at the sliders' sizes (in `WHATIF_SIZES` order), then the uploaded profile."""
        *sizes, profile = sizes_and_profile
        try:
            return whatif.panel_html(trace, {name: int(v) for name, v in zip(WHATIF_SIZES, sizes)}, profile)
        except Exception as exc:   # a prediction must never break the page
            return f'<div style="color:#b91c1c">the prediction failed: {html.esc(str(exc))}</div>'

    @staticmethod
    def load_profile(path):
        if not path:
            return None, "Costs: this machine's (or this run's) measured t(n)."
        with upload_errors("profile"):
            profile = whatif.load_profile(path)
        return profile, f"Costs: the uploaded profile ({html.esc(profile['name'])}), {len(profile['target_ms'])} sizes."

    @staticmethod
    def sync_sliders(trace):
        """Start the what-if sliders at the sizes the run actually used."""
        out = {name: gr.skip() for name in WHATIF_SIZES}
        for m, module in whatifs().items():
            settings = html.run_settings(trace.runs.get(m) if trace else None)
            for name in module.SLIDERS:
                value = settings.get(name)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[name] = int(value)
        return [out[name] for name in WHATIF_SIZES]

    def apply_workshop(self, name, current_pair) -> dict:
        """A workshop preset's prompt, sizes, temperature and precision (and pair), with its question; by
        component."""
        page = self.page
        settings = preset_settings(name, current_pair, self.presets, self.q4_here)
        if settings is None:
            return {box: gr.Markdown("", visible=False) for box in (page.question, page.presenter_question)}
        question, runs = settings.pop("question"), settings.pop("runs")
        values = {getattr(page, key): value for key, value in settings.items()}
        words = f"**Question.** {question}\n\n*Races in {runs}.*"
        return values | {box: gr.Markdown(words, visible=True) for box in (page.question, page.presenter_question)}


# The race settings a workshop preset sets (the rest stay as the page has them).
PRESET_SETTINGS = ("model", "prompt", "temperature", "max_new_tokens", "dtype", "tree", "tree_budget", "tree_depth",
                   "lookahead", "window", "ngram", "guesses")


def preset_settings(name, current_pair, presets, q4_here: bool = True) -> dict | None:
    """A workshop preset's race settings by `RaceRequest` name, its `question`, and `runs`: the precision and
    sizes it races in, in words; None for no preset.

    A preset may pick the model pair too, when this server offers it (`presets`); otherwise the pair
    stays, unless it is a draft another preset picked: then the default pair comes back. Its precision
    is the preset's; a q4 preset on a machine where q4 does not run (`q4_here` False: a GPU, or a CPU
    without a 4-bit kernel) races in `auto`'s precision, and `runs` says so.
    """
    preset = WORKSHOP.get(name)
    if preset is None:
        return None
    model = preset.get("model")
    if model is None and current_pair in (FEATURE_PRESET, INDEPENDENT_PRESET):
        model = DEFAULT_PRESET
    sizes = {**ILLUSTRATIVE_TREE, **ILLUSTRATIVE_LOOKAHEAD}
    sizes.update({k: preset[k] for k in sizes if k in preset})
    dtype = "auto" if preset["dtype"] == "q4" and not q4_here else preset["dtype"]
    settings = {**{k: preset[k] for k in ("prompt", "temperature", "max_new_tokens", "tree", "lookahead", "question")},
                "dtype": dtype, **sizes}
    if model in presets:
        settings["model"] = model
    settings["runs"] = preset_terms(preset, dtype, sizes)
    return settings


def preset_terms(preset: dict, dtype: str, sizes: dict) -> str:
    """What a preset races (at the `dtype` and `sizes` `preset_settings` gives it), in words: "q4 · tree of 20
    nodes over 5 levels · W = 5, N = 4, G = 4 · 64 tokens, greedy"."""
    precision = dtype if dtype == preset["dtype"] else (
        f"{dtype} ({preset['dtype']} does not run on this machine)")
    tree = {"adaptive": "an adaptive tree (its node limit: this machine's free rows)"}.get(
        preset["tree"], "tree of {tree_budget} nodes over {tree_depth} levels".format(**sizes))
    window = "W = {window}, N = {ngram}, G = {guesses}".format(**sizes)
    temperature = "greedy" if preset["temperature"] == 0 else f"T = {preset['temperature']:g}"
    return f"{precision} · Sequoia: {tree} · Lookahead: {window} · {preset['max_new_tokens']} tokens, {temperature}"

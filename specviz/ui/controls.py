"""The page's components, built section by section and kept by name on a `Page`.

Nothing here reacts to anything: `handlers` computes what the components show and
`wiring` connects their events. Initial values come from a `RaceRequest` (the
page's defaults are the HTTP API's defaults), slider bounds from `request.RANGES`.
"""

from __future__ import annotations

import gradio as gr

from ..request import CUSTOM, DTYPES, GRAPHS_MODES, METHOD_NAMES, RANGES, RaceRequest
from . import hardware, html, narrate, svg, whatif
from .content import EXAMPLES, SIZING_CHOICES, SIZING_NOTE, TREE_CHOICES, WORKSHOP
from .views import COLUMNS, DEFAULT_COLUMNS

# The race event's outputs, by name, in the order the page's event (and its HTTP endpoint) lists them.
RACE_OUTPUTS = (*(f"stats_{m}" for m in COLUMNS), *(f"text_{m}" for m in COLUMNS),
                "tree", "window", "pool", "pool_size", "latency", "cumulative", "summary", "trace", "slider",
                "caption", "file", "hw_html", "hw_plot", "status")
# The views one step shows: stepping through a race changes only these.
STEP_OUTPUTS = tuple(n for n in RACE_OUTPUTS if n not in ("trace", "file", "hw_html", "hw_plot", "status"))


class Outputs:
    """An event's output components by name: handlers give values by name, never by position."""

    def __init__(self, named: dict):
        self.names = list(named)
        self.components = list(named.values())

    def pack(self, **values) -> list:
        """The values in output order; an output not given is left as it is (gr.skip())."""
        unknown = set(values) - set(self.names)
        if unknown:
            raise KeyError(f"not an output of this event: {sorted(unknown)}")
        return [values[name] if name in values else gr.skip() for name in self.names]


class Page:
    """The components, set as attributes by the sections below (see `build_page` for the order)."""

    race_outputs: Outputs

    def race_inputs(self) -> list:
        """The 19 race settings' components, in `RaceRequest.names()` order."""
        return [getattr(self, name) for name in RaceRequest.names()]


def build_page(init: RaceRequest, limits, presets: list[str]) -> Page:
    """Every component of the app, in page order, inside the current `gr.Blocks`."""
    page = Page()
    page.trace = gr.State(None)
    gr.Markdown("# SpecViz — three decoders race on one prompt\n"
                "Autoregressive decoding makes one token per target forward. **Sequoia** drafts a tree of "
                "guesses with a small model and verifies it in one forward; **Lookahead** guesses n-grams "
                "by Jacobi iteration with the target itself; **Prompt lookup** (tick it for a fourth column) "
                "copies the text's own past as its guesses. Same output (greedy: token for token in fp32; "
                "sampled: the same distribution), different speed.", elem_classes=["sv-title"])
    _prompt_and_models(page, init, limits, presets)
    _sampling(page, init, limits)
    _method_settings(page, init)
    _race_columns(page)
    _stepper_and_views(page)
    _replay_whatif_hardware(page, init)
    page.race_outputs = Outputs({
        **{f"stats_{m}": page.stats[m] for m in COLUMNS}, **{f"text_{m}": page.texts[m] for m in COLUMNS},
        "tree": page.tree_plot, "window": page.window_plot, "pool": page.pool_html,
        "pool_size": page.pool_size_plot, "latency": page.latency_plot, "cumulative": page.cumulative_plot,
        "summary": page.summary, "trace": page.trace, "slider": page.step_slider, "caption": page.step_text,
        "file": page.trace_file, "hw_html": page.hw_html, "hw_plot": page.hw_plot, "status": page.status})
    assert page.race_outputs.names == list(RACE_OUTPUTS)
    return page


def _prompt_and_models(page: Page, init: RaceRequest, limits, presets: list[str]) -> None:
    # At a projector's 1280 x 720 everything up to ▶ Start race fits the first screen: the workshop preset
    # sits with the model pair, its question under the prompt it asks about, a gated model's note in the
    # pair's own hint.
    # Custom ids are offered when switched on, or when an explicit allow-list names what they may be.
    allow_custom = limits.allow_custom_models or limits.allowed_models_explicit
    with gr.Row(equal_height=False, elem_classes=["sv-setup"]):
        with gr.Column(scale=3):
            page.prompt = gr.Textbox(label="Prompt", value=init.prompt, lines=3, max_lines=8, elem_id="sv-prompt")
            with gr.Row():
                page.example_buttons = [gr.Button(name, size="sm", variant="secondary", min_width=60)
                                        for name in EXAMPLES]
            page.question = gr.Markdown("", elem_id="sv-question", visible=False)
        with gr.Column(scale=2):
            page.workshop = gr.Dropdown(["(none)"] + list(WORKSHOP), value="(none)", elem_id="sv-workshop",
                                        label="Workshop preset (prompt, sizes, temperature; then ▶ Start race)")
            gated_note = limits.gated_notice()   # gated presets need an HF_TOKEN: say so when held back
            page.model = gr.Dropdown(presets + ([CUSTOM] if allow_custom else []),
                                     value=init.model if init.model in presets else (
                                         presets[0] if presets else (CUSTOM if allow_custom else None)),
                                     label="Model pair (target + draft)", elem_id="sv-model",
                                     info=" ".join(["All but the offline default download from the Hugging Face "
                                                    "Hub on first use.", gated_note]).strip())
            with gr.Row(visible=False) as page.custom_row:
                page.custom_target = gr.Textbox(label="Target model id", placeholder="org/model")
                page.custom_draft = gr.Textbox(label="Draft model id (same tokenizer)",
                                               placeholder="org/small-model")
            page.methods = gr.CheckboxGroup(list(METHOD_NAMES.values()),
                                            value=[METHOD_NAMES.get(m, m) for m in init.methods], label="Methods")


def _sampling(page: Page, init: RaceRequest, limits) -> None:
    cap = limits.max_new_tokens   # the deployment's cap (specviz.hosting) is the slider's end
    temperature, top_p = RANGES["temperature"], RANGES["top_p"]
    with gr.Row(elem_classes=["sv-setup"]):
        page.max_new_tokens = gr.Slider(RANGES["max_new_tokens"].lo, cap, value=min(init.max_new_tokens, cap),
                                        step=1, label="Max new tokens", elem_id="sv-max-new")
        page.temperature = gr.Slider(temperature.lo, temperature.hi, value=init.temperature, step=0.05,
                                     label="Temperature (0 = greedy)", elem_id="sv-temperature")
        page.top_p = gr.Slider(top_p.lo, top_p.hi, value=init.top_p, step=0.05, label="Top-p")
        page.seed = gr.Number(value=init.seed, precision=0, label="Seed")


def _method_settings(page: Page, init: RaceRequest) -> None:
    with gr.Accordion("Method settings", open=False, elem_classes=["sv-setup"]):
        with gr.Row():
            with gr.Column():
                page.tree = gr.Radio(TREE_CHOICES, value=init.tree, label="Sequoia tree", elem_id="sv-tree-mode")
                with gr.Row():
                    page.tree_budget = gr.Number(value=init.tree_budget, precision=0,
                                                 label="Tree budget n (nodes incl. root)")
                    page.tree_depth = gr.Number(value=init.tree_depth, precision=0, label="Tree depth d")
            with gr.Column():
                page.lookahead = gr.Radio(SIZING_CHOICES, value=init.lookahead, label="Lookahead sizes",
                                          elem_id="sv-look-mode")
                with gr.Row():
                    page.window = gr.Number(value=init.window, precision=0, label="W (window)")
                    page.ngram = gr.Number(value=init.ngram, precision=0, label="N (n-gram)")
                    page.guesses = gr.Number(value=init.guesses, precision=0, label="G (guesses)")
                page.pool_from_prompt = gr.Checkbox(value=init.pool_from_prompt,
                                                    label="Seed the n-gram pool from the prompt")
            with gr.Column():
                page.dtype = gr.Dropdown(list(DTYPES), value=init.dtype,
                                         label="Precision (fp32 = exact greedy equality; auto on a CPU: "
                                               "the fastest measured here)")
                page.graphs = gr.Dropdown(list(GRAPHS_MODES), value=init.graphs, elem_id="sv-graphs",
                                          label="CUDA graphs (auto: on for a GPU; a CPU runs the "
                                                "same step uncaptured)")
        gr.Markdown(SIZING_NOTE, elem_id="sv-sizing-note")


def _race_columns(page: Page) -> None:
    with gr.Row(elem_id="sv-run-row"):
        page.run_btn = gr.Button("▶ Start race", variant="primary", elem_id="sv-run", scale=3)
        page.stop_btn = gr.Button("■ Stop", variant="stop", elem_id="sv-stop", scale=1)
        # Large type and the race, the tree and the caption on one screen, for a projector (`?presenter=1` in
        # the page's address opens the page in it); the page's script applies it, see static/page.css.
        page.presenter = gr.Checkbox(False, label="Presenter view", elem_id="sv-presenter", scale=1, min_width=150,
                                     container=False, interactive=True)
    page.status = gr.Markdown("", elem_id="sv-status")
    # The preset's question again, for the presenter view, which hides the setup it sits in above.
    page.presenter_question = gr.Markdown("", elem_id="sv-question-presenter", visible=False)
    # The decoding worker's measurement of this machine for 'auto' sizes, polled once a second while it runs.
    page.measuring = gr.HTML("", elem_id="sv-measuring")
    page.measure_timer = gr.Timer(1.0, active=False)
    gr.HTML(html.legend_html(), elem_classes=["sv-legend-block"])
    page.stats, page.texts = {}, {}
    with gr.Row(equal_height=False, elem_id="sv-columns"):
        for m in COLUMNS:
            # Four raced columns still side by side at a projector's 1280 (Gradio's 320 px minimum wraps the fourth).
            with gr.Column(elem_classes=["sv-col"], min_width=240):
                page.stats[m] = gr.HTML(html.stats_html(m, None, raced=m in DEFAULT_COLUMNS), elem_id=f"sv-stats-{m}")
                page.texts[m] = gr.HTML(html.tokens_html(None), elem_id=f"sv-text-{m}")
    page.summary = gr.HTML("", elem_id="sv-summary")


def _stepper_and_views(page: Page) -> None:
    # The step-through sits right above the views it drives; the caption explains the step beside them.
    with gr.Row(elem_id="sv-stepper", equal_height=True):
        page.prev_btn = gr.Button("◀ Prev", size="sm", scale=1, min_width=70, elem_id="sv-prev")
        page.step_slider = gr.Slider(0, 1, value=0, step=1, label="Global step (the ← / → keys step it too)",
                                     scale=6, elem_id="sv-slider")
        page.next_btn = gr.Button("Next ▶", size="sm", scale=1, min_width=70, elem_id="sv-next")
    with gr.Row(equal_height=False, elem_id="sv-views"):
        with gr.Column(scale=3, min_width=320):
            page.tree_plot = gr.HTML(svg.tree_svg(None), elem_id="sv-tree")
        with gr.Column(scale=2, min_width=300):
            page.step_text = gr.HTML(narrate.caption_html(None, 0), elem_id="sv-caption")
            page.window_plot = gr.HTML(svg.window_html(None), elem_id="sv-window")
            page.pool_html = gr.HTML("", elem_id="sv-pool")
    with gr.Row():
        page.cumulative_plot = gr.HTML(svg.cumulative_svg({}), elem_id="sv-cumulative")
        page.latency_plot = gr.HTML(svg.latency_svg({}), elem_id="sv-latency")
    page.pool_size_plot = gr.HTML(svg.pool_size_svg(None), elem_id="sv-pool-size")


def _replay_whatif_hardware(page: Page, init: RaceRequest) -> None:
    with gr.Accordion("Replay: download this run's trace, or upload one", open=False, elem_id="sv-replay"):
        with gr.Row():
            page.trace_file = gr.File(label="Download this run's trace (JSON)", interactive=False)
            page.upload = gr.File(label="Upload a trace to replay (no model needed)", file_types=[".json"],
                                  type="filepath", elem_id="sv-upload")
    # The what-if sliders span sizes worth predicting, not every size a race accepts.
    with gr.Accordion("What if: predicted speed for any size, on this machine's measured costs", open=False,
                      elem_id="sv-whatif-box"):
        with gr.Row():
            page.wi_sliders = {name: gr.Slider(low, high, value=_slider_start(getattr(init, name, None), low, start),
                                               step=1, label=label)
                               for name, (low, high, start, label) in whatif.sliders().items()}
        with gr.Row():
            page.wi_profile = gr.File(label="Load a saved t(n) profile (.json, e.g. measured on a GPU)",
                                      file_types=[".json"], type="filepath", scale=2, height=120)
            page.wi_note = gr.Markdown("Costs: this machine's (or this run's) measured t(n). A profile is a "
                                       "`forward-*.json` or `sequoia-plan-*.json` from another machine's "
                                       "`~/.cache/specviz/profiles`.", elem_id="sv-whatif-src")
        page.whatif_html = gr.HTML(whatif.panel_html(None), elem_id="sv-whatif")
        page.profile = gr.State(None)
    with gr.Accordion("Hardware: why speculation pays here or not, and why 'auto' chose these sizes", open=False):
        page.hw_html = gr.HTML(hardware.panel_html(None))
        page.hw_plot = gr.HTML(svg.forward_curve_svg({}), elem_id="sv-hw-curve")


def _slider_start(value, low: int, default: int) -> int:
    """A what-if slider starts at the request's size, or its default where the request has none (or a 0 the
    slider cannot show)."""
    return default if value is None or isinstance(value, bool) or value < low else int(value)

"""The Gradio app: controls, three racing columns, tree / pool / latency views, replay, hardware panel.

One generator event runs the whole race (`Race` steps the decoders in turn, least
compute first), streaming texts every step and figures at most a few times a
second. Per-visitor state is only the finished/streaming `RaceTrace` in a
`gr.State`; loaded model pairs are shared read-only through a small cache.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
import traceback
import weakref
from pathlib import Path

import gradio as gr

from ..engine.race import PairCache, free_accelerator_memory, is_out_of_memory, release_freed_memory
from ..engine.worker import WorkerSlot, WorkerUnavailable
from ..errors import InvalidInput, SpecVizError
from ..trace import RaceTrace
from . import hardware, html, narrate, svg, views, whatif

DEFAULT_PRESET = "SmolLM2-135M-Instruct (offline default)"
# The same target with each shipped draft by name, so a workshop can race one against the other
# whichever the default takes: the EAGLE-style draft reads the target's hidden states (the tree's
# hover says what each node's draft saw); the independent one is a 4-layer model of its own.
FEATURE_PRESET = "SmolLM2-135M-Instruct (offline default) + feature draft"
INDEPENDENT_PRESET = "SmolLM2-135M-Instruct (offline default) + independent draft"
# label -> (target, draft); draft None = the package's default choice for that target.
PRESETS = {
    DEFAULT_PRESET: ("default", None),
    FEATURE_PRESET: ("default", "feature"),
    INDEPENDENT_PRESET: ("default", "independent"),
    "SmolLM2-1.7B-Instruct + SmolLM2-135M-Instruct": ("HuggingFaceTB/SmolLM2-1.7B-Instruct",
                                                     "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "Llama-2-7b-chat + JackFram/llama-68m": ("meta-llama/Llama-2-7b-chat-hf", "JackFram/llama-68m"),
    "Qwen2.5-1.5B-Instruct + Qwen2.5-0.5B-Instruct": ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
}
CUSTOM = "Custom model ids…"
REPEATING_PROMPT = "Write a song whose chorus, 'Row, row, row your boat down the river', is sung after every verse."
EXAMPLES = {
    "chat": "What are three tips for giving a good talk?",
    "code": "Write a Python function that checks whether a string is a palindrome.",
    "math": "A train travels 120 km in 1.5 hours. What is its average speed in km/h? Explain step by step.",
    "story": "Tell a short story about a robot who learns to paint.",
    "repeats itself": REPEATING_PROMPT,
}
# The API takes the names the page shows; the engine speaks ids.
METHOD_NAMES = {"ar": "Autoregressive", "sequoia": "Sequoia", "lookahead": "Lookahead"}
METHOD_IDS = {name: mid for mid, name in METHOD_NAMES.items()}
# Streaming rates, chosen so a browser on the same machine stays nearly idle (issue 12):
# texts about 7 times a second (each update carries every step since the last), the
# views (inline SVG/HTML, see svg.py) once a second. Measured with scripts/app_speed.py
# on 2 cores: at 12/s and 2/s the renderer took 38% of a core and Lookahead showed
# 0.84x its standalone speed; at these rates 31% and 0.98x.
TEXT_INTERVAL_S = float(os.environ.get("SPECVIZ_TEXT_INTERVAL", "0.15"))
LIVE_VIEW_INTERVAL_S = float(os.environ.get("SPECVIZ_LIVE_VIEW_INTERVAL", "1.0"))

# Sizing modes (the API's `tree` / `lookahead` values): 'auto' = fastest on this hardware,
# 'illustrative' = shapes that teach (several levels; their cost is shown), 'manual' = the numbers given.
SIZING_CHOICES = [("fastest (auto)", "auto"), ("illustrative", "illustrative"), ("manual", "manual")]
# Sequoia's tree may also be grown each step from the draft's confidence ('adaptive', EAGLE-2's dynamic tree).
TREE_CHOICES = SIZING_CHOICES + [("adaptive (draft's confidence)", "adaptive")]
SIZING_NOTE = (
    "**fastest (auto)** measures this machine's forward cost and picks the size with the lowest predicted time per "
    "token — on a CPU often a shallow tree and a small window, which draw poor pictures. For Sequoia it then races "
    "that DP tree against the adaptive tree on a few prompts and runs the faster (the hardware panel shows the "
    "race). **illustrative** uses a "
    f"tree of {whatif.ILLUSTRATIVE_TREE['tree_budget']} nodes over {whatif.ILLUSTRATIVE_TREE['tree_depth']} levels "
    f"and a window of W = {whatif.ILLUSTRATIVE_LOOKAHEAD['window']}, N = {whatif.ILLUSTRATIVE_LOOKAHEAD['ngram']} "
    f"(3 levels), G = {whatif.ILLUSTRATIVE_LOOKAHEAD['guesses']}: one target forward over 20 and 27 tokens per "
    "step instead of a handful, so on a CPU it is usually slower than *fastest* — the *What if* panel below "
    "shows by how much on this machine. **adaptive** grows each step's tree from the draft's own confidence "
    "(EAGLE-2's dynamic tree): deep where the draft is sure, short where it hesitates, so the shape changes "
    "from step to step; still exact.")
# Workshop presets: prompt + sizes + temperature together, with one guiding question each.
WORKSHOP = {
    "Repetitive text: where Lookahead's pool wins": dict(
        # The offline default sings this chorus over and over for 64 tokens and more (a list to "repeat three
        # times" it wrote once and ended, 16 tokens: nothing left for the pool to win).
        prompt=REPEATING_PROMPT,
        temperature=0.0, max_new_tokens=64, tree="illustrative", lookahead="illustrative",
        question="After the chorus's first line, how many tokens does one Lookahead step write? Step to such "
                 "a step: did those tokens come from the window or from the pool, and who put them there?"),
    "Code: what does a small draft get right?": dict(
        prompt="Write a Python function that checks whether a string is a palindrome.",
        temperature=0.0, max_new_tokens=64, tree="illustrative", lookahead="illustrative",
        question="Step through Sequoia: which tokens does the draft get accepted — keywords, punctuation and "
                 "indentation, or names? Why would that be?"),
    "Open chat, greedy (T = 0)": dict(
        prompt="What are three tips for giving a good talk?", temperature=0.0, max_new_tokens=48,
        tree="illustrative", lookahead="illustrative",
        question="Note Sequoia's tokens per forward and check the three texts are identical. Will the "
                 "T = 1.0 preset keep them identical — and will its tree accept as much?"),
    "Open chat, sampled (T = 1.0)": dict(
        prompt="What are three tips for giving a good talk?", temperature=1.0, max_new_tokens=48,
        tree="illustrative", lookahead="illustrative",
        question="The texts now differ from autoregressive, yet the method is exact. Step to a Sequoia rejection: "
                 "read its q and P — where did the bonus token come from, and why does that keep the output exact?"),
    "A draft that reads the target's hidden states": dict(
        model=FEATURE_PRESET,
        prompt="Write a Python function that checks whether a string is a palindrome.",
        temperature=0.0, max_new_tokens=48, tree="illustrative", lookahead="auto",
        question="Hover a level-1 node, then a level-3 node: what did the draft read for each? Does its "
                 "acceptance fall with depth as it feeds on its own predictions? Then pick *Model pair → "
                 "+ independent draft* (a 4-layer model of its own) and race again: which draft writes more "
                 "tokens per forward, and which is faster?"),
    "A tree that follows the draft's confidence": dict(
        prompt="Write a Python function that checks whether a string is a palindrome.", temperature=0.0,
        max_new_tokens=64, tree="adaptive", lookahead="auto",
        question="Step through Sequoia: where does the adaptive tree grow deep, and where does it stay short and "
                 "wide? Read the q of its first level in each case: what does the draft's confidence predict?"),
    "A tree too big for this hardware": dict(
        prompt="Tell a short story about a robot who learns to paint.", temperature=0.0, max_new_tokens=48,
        tree="manual", tree_budget=96, tree_depth=8, lookahead="auto",
        question="Tokens per forward go up with a huge tree — do tokens per second? Open *What if*: where does "
                 "the predicted speedup peak on this machine, and where would it peak on a GPU?"),
}

CSS = """
.sv-col { min-width: 0; }
.sv-title h1 { margin-bottom: 0; }
#sv-run { font-size: 18px; }
html, body { overflow-x: hidden; }
.gradio-container { max-width: 100% !important; }
.sv-view, .sv-caption, .sv-whatif { max-width: 100%; overflow-x: auto; }
#sv-prev, #sv-next { align-self: center; max-height: 44px; }
#sv-question { background: #eff6ff; border-left: 4px solid #2563eb; padding: 4px 10px; border-radius: 4px; }
/* Pause what is off screen: Chromium neither lays out nor paints a content-visibility:auto view
   outside the viewport while the race streams into it; scrolled into view, it shows its latest state.
   contain-intrinsic-size keeps the page's height steady (the last rendered size, else 420 px). */
#sv-tree, #sv-caption, #sv-window, #sv-pool, #sv-cumulative, #sv-latency, #sv-pool-size, #sv-hw-curve {
  content-visibility: auto; contain-intrinsic-size: auto 420px; }
""" + narrate.CAPTION_CSS + whatif.WHATIF_CSS

# Prev / Next from the keyboard (ArrowLeft / ArrowRight), unless the focus is in a text field or slider.
KEYS_JS = """
<script>
document.addEventListener('keydown', function (e) {
  if (e.altKey || e.ctrlKey || e.metaKey) return;
  if (e.key !== 'ArrowLeft' && e.key !== 'ArrowRight') return;
  var t = e.target, tag = (t && t.tagName || '').toLowerCase();
  if (tag === 'textarea' || tag === 'select' || (t && t.isContentEditable)) return;
  if (tag === 'input' && !['checkbox', 'radio', 'button'].includes((t.type || '').toLowerCase())) return;
  var b = document.getElementById(e.key === 'ArrowLeft' ? 'sv-prev' : 'sv-next');
  if (b) { e.preventDefault(); b.click(); }
});
</script>
"""


def hosting_limits():
    """The deployment's limits (env vars, see specviz.hosting): custom ids, caps, queue size."""
    from ..hosting import HostingLimits

    return HostingLimits.from_env()


class RaceControl:
    """Lets the Stop button end this session's race at once (between two steps)."""

    def __init__(self):
        self.stop = threading.Event()
        self.race = None     # the in-process race, when the race runs here
        self.worker = None   # the worker running it, when it runs there

    def close(self) -> None:
        self.stop.set()
        if self.worker is not None:
            self.worker.stop()
        if self.race is not None:
            self.race.close()


def _int(value, name: str, lo: int, hi: int) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{name} must be a whole number, got {value!r}") from None
    if not number.is_integer():
        raise InvalidInput(f"{name} must be a whole number, got {value!r}")
    if not lo <= number <= hi:
        raise InvalidInput(f"{name} must be between {lo} and {hi}, got {int(number)}")
    return int(number)


def method_options(tree_mode, budget, depth, look_mode, window, ngram, guesses, pool_from_prompt) -> dict:
    """Decoder keyword arguments from the controls ('auto' = None, sizes checked here)."""
    sequoia = {"tree_budget": None, "tree_depth": None}
    if tree_mode == "adaptive":   # its own limits (the target's free rows, 8 levels, threshold 0.05)
        sequoia = {"tree": "adaptive", "tree_budget": None, "tree_depth": None}
    elif tree_mode == "illustrative":
        sequoia = dict(whatif.ILLUSTRATIVE_TREE)
    elif tree_mode == "manual":
        sequoia = {"tree_budget": _int(budget, "tree budget", 2, 512), "tree_depth": _int(depth, "tree depth", 1, 32)}
        if sequoia["tree_depth"] >= sequoia["tree_budget"]:
            raise InvalidInput("the tree depth must be smaller than the tree budget (the root counts as a node)")
    lookahead = {"window": None, "ngram": None, "guesses": None, "pool_from_prompt": bool(pool_from_prompt)}
    if look_mode == "illustrative":
        lookahead.update(whatif.ILLUSTRATIVE_LOOKAHEAD)
    elif look_mode == "manual":
        lookahead.update(window=_int(window, "W (window)", 1, 64), ngram=_int(ngram, "N (n-gram size)", 2, 16),
                         guesses=_int(guesses, "G (guesses)", 0, 64))
    return {"sequoia": sequoia, "lookahead": lookahead}


def method_ids(methods) -> list[str]:
    """Method names as the page shows them (or engine ids) -> engine ids, in race order."""
    if not methods:
        raise InvalidInput("choose at least one method to run")
    ids = []
    for m in methods:
        mid = METHOD_IDS.get(m, m if m in METHOD_NAMES else None)
        if mid is None:
            raise InvalidInput(f"unknown method {m!r}; choose from {', '.join(METHOD_NAMES.values())}")
        if mid not in ids:
            ids.append(mid)
    return ids


def resolve_models(preset, custom_target, custom_draft, limits) -> tuple[str, str | None]:
    if preset == CUSTOM:
        if not (limits.allow_custom_models or limits.allowed_models_explicit):
            raise InvalidInput("custom model ids are switched off on this server (SPECVIZ_ALLOW_CUSTOM_MODELS); "
                               "pick a preset")
        target = (custom_target or "").strip()
        if not target:
            raise InvalidInput("enter a target model id (or pick a preset)")
        draft = (custom_draft or "").strip() or None
        for model_id in (target, None if draft == "self" else draft):
            limits.check_model(model_id)
        return target, draft
    if preset not in PRESETS:
        raise InvalidInput(f"unknown model preset {preset!r}")
    if preset not in allowed_presets(limits):
        raise InvalidInput(f"the model pair {preset!r} is not available on this server")
    return PRESETS[preset]


def allowed_presets(limits) -> list[str]:
    """The presets whose target and draft this deployment serves (SPECVIZ_ALLOWED_MODELS)."""
    allowed = []
    for label, models in PRESETS.items():
        try:
            for model_id in models:
                limits.check_model(model_id)
        except InvalidInput:
            continue
        allowed.append(label)
    return allowed


def sampling_config(temperature, top_p, seed):
    from ..engine.sampling import SamplingConfig

    seed_value = None
    if seed not in (None, ""):
        seed_value = _int(seed, "seed", 0, 2**31 - 1)
    try:
        return SamplingConfig(temperature=float(temperature), top_p=float(top_p), seed=seed_value).validated()
    except (TypeError, ValueError) as exc:
        raise InvalidInput(str(exc)) from None


def race_request(limits, prompt, methods, preset, custom_target, custom_draft, dtype, max_new_tokens,
                 temperature, top_p, seed, tree_mode, budget, depth, look_mode, window, ngram, guesses,
                 pool_from_prompt) -> dict:
    """The controls' values, checked, as the plain request a race runs from (here or in the worker)."""
    from ..engine.text import validate_prompt

    validate_prompt(prompt, limits.max_prompt_chars)
    ids = method_ids(methods)
    max_new = _int(max_new_tokens, "max new tokens", 1, limits.max_new_tokens)
    sampling = sampling_config(temperature, top_p, seed)
    options = method_options(tree_mode, budget, depth, look_mode, window, ngram, guesses, pool_from_prompt)
    target, draft = resolve_models(preset, custom_target, custom_draft, limits)
    return {"target": target, "draft": draft, "dtype": dtype or "auto", "prompt": prompt, "methods": ids,
            "sampling": sampling, "max_new_tokens": max_new, "options": {m: options.get(m, {}) for m in ids},
            "max_run_seconds": limits.max_run_seconds,
            "label": DEFAULT_PRESET if target == "default" else target}


def race_events(pairs, limits, control: RaceControl | None, *control_values):
    """The race run in this process, as ("status", str) and ("trace", RaceTrace, done) events.

    It is the function ZeroGPU runs on the GPU (and the fallback when the worker
    cannot start), so it yields picklable values only.
    """
    from ..engine import race as engine

    request = race_request(limits, *control_values)

    def attach(race):
        if control is not None:
            control.race = race

    should_stop = (lambda: control.stop.is_set()) if control is not None else (lambda: False)
    trace = None
    for event in engine.race_events(pairs, request, should_stop, on_start=attach):
        if event[0] == "status":
            yield event
        elif event[0] == "start":
            trace = event[1]   # the live trace: the race appends to it as it steps
            yield ("trace", trace, False)
        elif event[0] == "step":
            yield ("trace", trace, False)
        elif event[0] == "end":
            yield ("trace", event[1], True)


def worker_race_events(worker, limits, control: RaceControl | None, *control_values):
    """The same events, from a race the worker process runs; the trace here is a mirror it streams."""
    request = race_request(limits, *control_values)
    if control is not None:
        control.worker = worker
    trace = None
    for event in worker.race(request):
        kind = event[0]
        if kind == "status":
            yield event
        elif kind == "start":
            trace = event[1]
            yield ("trace", trace, False)
        elif kind == "step":
            _, method, record, finish_reason, error = event
            run = trace.runs[method]
            if record is not None:
                run.steps.append(record)
                trace.order.append([method, record.step])
            run.finish_reason, run.error = finish_reason, error
            if not worker.pending():   # several steps waiting: show them as one update
                yield ("trace", trace, False)
        elif kind == "end":
            yield ("trace", event[1], True)
        elif kind == "error":
            _, what, message = event
            if what == "input":
                raise InvalidInput(message)
            if what == "oom":
                raise WorkerOutOfMemory(message)
            raise WorkerRunFailed(message)


class WorkerOutOfMemory(RuntimeError):
    """The worker ran out of memory loading or preparing models (it freed them)."""


class WorkerRunFailed(RuntimeError):
    """The worker's race failed with an unexpected error (its message says which)."""


class TraceFiles:
    """Downloadable trace files in one folder of this app, the oldest removed beyond `keep`.

    Gradio copies each file into its own cache (purged by `delete_cache`) when it is
    sent, so only the last few need to stay here; a long-running Space's disk stays bounded.
    """

    def __init__(self, keep: int = 32):
        self.keep = keep
        self.folder = Path(tempfile.mkdtemp(prefix="specviz-traces-"))
        self.lock = threading.Lock()
        weakref.finalize(self, shutil.rmtree, self.folder, True)   # gone when the app is

    def write(self, trace: RaceTrace) -> str:
        with self.lock:
            folder = Path(tempfile.mkdtemp(dir=self.folder))   # one folder each: the download keeps its name
            path = folder / "specviz-trace.json"
            path.write_text(trace.to_json())
            old = sorted(self.folder.iterdir(), key=lambda p: p.stat().st_mtime)[:-self.keep]
            for stale in old:
                for f in stale.iterdir():
                    f.unlink(missing_ok=True)
                stale.rmdir()
            return str(path)


def prune_session_config(demo: gr.Blocks, session_hash: str | None) -> int:
    """Drop the stale component copies Gradio leaves in one session's config; returns how many.

    Gradio 6 answers each `gr.skip()` for an output by building a new component (with a
    fresh id) as this session's copy of it; the next real value for that output then files
    that copy under its fresh id too, with the serialised value (a whole Plotly figure) in
    `config_values`. Nothing removes those entries, and a streamed race skips the throttled
    figures on most steps, so one session's state grew by ~2 MB per run (issue #8's soak).
    Only the ids of the app's own components are ever looked up again, so every other entry
    is dropped: a session's state stays bounded however many races it runs.
    """
    try:
        session = demo.state_holder.session_data.get(session_hash)
        if session is None:
            return 0
        live = demo.blocks   # id -> every component and layout block of this app (no gr.render here)
        dropped = 0
        for table in (session.blocks_config.blocks, session.config_values):
            for key in list(table):   # a snapshot: Gradio may set entries from its event loop meanwhile
                if key not in live:
                    table.pop(key, None)
                    dropped += 1
        return dropped
    except AttributeError:   # another Gradio layout of the session state: leave it alone
        return 0


DEFAULTS = {"prompt": EXAMPLES["code"], "max_new_tokens": 96, "tree_mode": "auto", "look_mode": "auto",
            "dtype": "auto", "methods": list(METHOD_NAMES.values()), "tree_budget": 16, "tree_depth": 4,
            "window": 4, "ngram": 3, "guesses": 4}


def use_worker(env=None) -> bool:
    """Decode in a worker process unless SPECVIZ_WORKER=0 (see specviz.engine.worker)."""
    env = os.environ if env is None else env
    return env.get("SPECVIZ_WORKER", "1").strip().lower() not in ("0", "false", "no", "off")


def build_demo(gpu=None, defaults: dict | None = None, worker: bool | None = None,
               gpu_duration: float | None = None) -> gr.Blocks:
    """The app. `gpu` wraps the compute generator (ZeroGPU's `spaces.GPU`) when given, and
    `gpu_duration` is the seconds that wrapper grants one race (the run limit fits inside it);
    `defaults` overrides the controls' initial values (tests pin small explicit sizes);
    `worker` decodes in a worker process (default: yes, except under ZeroGPU or SPECVIZ_WORKER=0)."""
    init = {**DEFAULTS, **(defaults or {})}
    pairs = PairCache()
    limits = hosting_limits()
    if gpu_duration is not None:
        limits = limits.within_gpu_call(gpu_duration)
    controls: dict[str, RaceControl] = {}   # session hash -> its running race's control
    trace_files = TraceFiles()

    def compute(control, *controls_values):
        # A closure, so ZeroGPU pickles only the control values and yields, never the model cache.
        yield from race_events(pairs, limits, control, *controls_values)

    if gpu is not None:
        compute = gpu(compute)
    if worker is None:
        worker = gpu is None and use_worker()
    # ZeroGPU hands the race a GPU inside the process `spaces.GPU` runs it in: no worker there.
    slot = WorkerSlot() if worker else None
    if slot is not None:
        atexit.register(slot.close)
    # Custom ids are offered when switched on, or when an explicit allow-list names what they may be.
    allow_custom = limits.allow_custom_models or limits.allowed_models_explicit

    # delete_cache: Gradio's copies of served files (traces, uploads) older than an hour go, hourly.
    with gr.Blocks(title="SpecViz: speculative decoding, side by side", analytics_enabled=False,
                   delete_cache=(3600, 3600)) as demo:
        trace_state = gr.State(None)
        gr.Markdown("# SpecViz — three decoders race on one prompt\n"
                    "Autoregressive decoding makes one token per target forward. **Sequoia** drafts a tree of "
                    "guesses with a small model and verifies it in one forward; **Lookahead** guesses n-grams "
                    "by Jacobi iteration with the target itself. Same output (greedy: token for token in fp32; "
                    "sampled: the same distribution), different speed.", elem_classes=["sv-title"])
        # At a projector's 1280 x 720 everything up to ▶ Start race fits the first screen: the workshop preset
        # sits with the model pair, its question under the prompt it asks about, a gated model's note in the
        # pair's own hint.
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                prompt = gr.Textbox(label="Prompt", value=init["prompt"], lines=3, max_lines=8, elem_id="sv-prompt")
                with gr.Row():
                    example_buttons = [gr.Button(name, size="sm", variant="secondary", min_width=60)
                                       for name in EXAMPLES]
                question = gr.Markdown("", elem_id="sv-question", visible=False)
            with gr.Column(scale=2):
                workshop = gr.Dropdown(["(none)"] + list(WORKSHOP), value="(none)", elem_id="sv-workshop",
                                       label="Workshop preset (prompt, sizes, temperature; then ▶ Start race)")
                presets = allowed_presets(limits)
                gated_note = limits.gated_notice()   # gated presets need an HF_TOKEN: say so when held back
                preset = gr.Dropdown(presets + ([CUSTOM] if allow_custom else []),
                                     value=presets[0] if presets else (CUSTOM if allow_custom else None),
                                     label="Model pair (target + draft)", elem_id="sv-model",
                                     info=" ".join(["All but the offline default download from the Hugging Face "
                                                    "Hub on first use.", gated_note]).strip())
                with gr.Row(visible=False) as custom_row:
                    custom_target = gr.Textbox(label="Target model id", placeholder="org/model")
                    custom_draft = gr.Textbox(label="Draft model id (same tokenizer)", placeholder="org/small-model")
                methods = gr.CheckboxGroup(list(METHOD_NAMES.values()),
                                           value=[METHOD_NAMES.get(m, m) for m in init["methods"]], label="Methods")
        with gr.Row():
            max_new = gr.Slider(1, limits.max_new_tokens, value=min(init["max_new_tokens"], limits.max_new_tokens), step=1,
                                label="Max new tokens", elem_id="sv-max-new")
            temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)",
                                    elem_id="sv-temperature")
            top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
            seed = gr.Number(value=0, precision=0, label="Seed")
        with gr.Accordion("Method settings", open=False):
            with gr.Row():
                with gr.Column():
                    tree_mode = gr.Radio(TREE_CHOICES, value=init["tree_mode"], label="Sequoia tree",
                                         elem_id="sv-tree-mode")
                    with gr.Row():
                        budget = gr.Number(value=init["tree_budget"], precision=0, label="Tree budget (nodes incl. root)")
                        depth = gr.Number(value=init["tree_depth"], precision=0, label="Tree depth")
                with gr.Column():
                    look_mode = gr.Radio(SIZING_CHOICES, value=init["look_mode"], label="Lookahead sizes",
                                         elem_id="sv-look-mode")
                    with gr.Row():
                        window = gr.Number(value=init["window"], precision=0, label="W (window)")
                        ngram = gr.Number(value=init["ngram"], precision=0, label="N (n-gram)")
                        guesses = gr.Number(value=init["guesses"], precision=0, label="G (guesses)")
                    pool_from_prompt = gr.Checkbox(value=True, label="Seed the n-gram pool from the prompt")
                dtype = gr.Dropdown(["auto", "fp32", "bf16"], value=init["dtype"],
                                    label="Precision (fp32 = exact greedy equality)")
            gr.Markdown(SIZING_NOTE, elem_id="sv-sizing-note")
        with gr.Row():
            run_btn = gr.Button("▶ Start race", variant="primary", elem_id="sv-run", scale=3)
            stop_btn = gr.Button("■ Stop", variant="stop", elem_id="sv-stop", scale=1)
        status = gr.Markdown("", elem_id="sv-status")
        gr.HTML(html.legend_html())
        stats, texts = {}, {}
        with gr.Row(equal_height=False):
            for m, label in (("ar", "Autoregressive"), ("sequoia", "Sequoia"), ("lookahead", "Lookahead")):
                with gr.Column(elem_classes=["sv-col"]):
                    stats[m] = gr.HTML(html.stats_html(m, None), elem_id=f"sv-stats-{m}")
                    texts[m] = gr.HTML(html.tokens_html(None), elem_id=f"sv-text-{m}")
        summary = gr.HTML("", elem_id="sv-summary")
        # The step-through sits right above the views it drives; the caption explains the step beside them.
        with gr.Row(elem_id="sv-stepper", equal_height=True):
            prev_btn = gr.Button("◀ Prev", size="sm", scale=1, min_width=70, elem_id="sv-prev")
            step_slider = gr.Slider(0, 1, value=0, step=1, label="Global step (the ← / → keys step it too)",
                                    scale=6, elem_id="sv-slider")
            next_btn = gr.Button("Next ▶", size="sm", scale=1, min_width=70, elem_id="sv-next")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3, min_width=320):
                tree_plot = gr.HTML(svg.tree_svg(None), elem_id="sv-tree")
            with gr.Column(scale=2, min_width=300):
                step_text = gr.HTML(narrate.caption_html(None, 0), elem_id="sv-caption")
                window_plot = gr.HTML(svg.window_html(None), elem_id="sv-window")
                pool_html = gr.HTML("", elem_id="sv-pool")
        with gr.Row():
            cumulative_plot = gr.HTML(svg.cumulative_svg({}), elem_id="sv-cumulative")
            latency_plot = gr.HTML(svg.latency_svg({}), elem_id="sv-latency")
        pool_size_plot = gr.HTML(svg.pool_size_svg(None), elem_id="sv-pool-size")
        with gr.Accordion("Replay: download this run's trace, or upload one", open=False, elem_id="sv-replay"):
            with gr.Row():
                trace_file = gr.File(label="Download this run's trace (JSON)", interactive=False)
                upload = gr.File(label="Upload a trace to replay (no model needed)", file_types=[".json"],
                                 type="filepath", elem_id="sv-upload")
        with gr.Accordion("What if: predicted speed for any size, on this machine's measured costs", open=False,
                          elem_id="sv-whatif-box"):
            with gr.Row():
                wi_budget = gr.Slider(2, 128, value=init["tree_budget"], step=1, label="Tree budget n")
                wi_depth = gr.Slider(1, 12, value=init["tree_depth"], step=1, label="Tree depth d")
                wi_window = gr.Slider(1, 32, value=init["window"], step=1, label="W (window)")
                wi_ngram = gr.Slider(2, 8, value=init["ngram"], step=1, label="N (n-gram)")
                wi_guesses = gr.Slider(0, 32, value=init["guesses"], step=1, label="G (guesses)")
            with gr.Row():
                wi_profile = gr.File(label="Load a saved t(n) profile (.json, e.g. measured on a GPU)",
                                     file_types=[".json"], type="filepath", scale=2, height=120)
                wi_note = gr.Markdown("Costs: this machine's (or this run's) measured t(n). A profile is a "
                                      "`forward-*.json` or `sequoia-plan-*.json` from another machine's "
                                      "`~/.cache/specviz/profiles`.", elem_id="sv-whatif-src")
            whatif_html = gr.HTML(whatif.panel_html(None, 16, 4, 4, 3, 4), elem_id="sv-whatif")
            profile_state = gr.State(None)
        with gr.Accordion("Hardware: why 'auto' chose these sizes", open=False):
            hw_html = gr.HTML(hardware.panel_html(None))
            hw_plot = gr.HTML(svg.forward_curve_svg({}), elem_id="sv-hw-curve")

        text_outputs = [stats["ar"], stats["sequoia"], stats["lookahead"], texts["ar"], texts["sequoia"],
                        texts["lookahead"]]
        plot_outputs = [tree_plot, window_plot, pool_html, pool_size_plot, latency_plot, cumulative_plot]
        full_outputs = text_outputs + plot_outputs + [summary, trace_state, step_slider, step_text, trace_file,
                                                      hw_html, hw_plot, status]
        STATUS = full_outputs.index(status)

        def status_only(text):
            out = [gr.skip()] * len(full_outputs)
            out[STATUS] = text
            return out

        def full_view(trace: RaceTrace | None, upto: int | None = None, running=False, status_text=None,
                      with_file=True):
            total = len(trace.order) if trace else 0
            upto = total if upto is None else max(0, min(int(upto), total))
            tv = views.text_views(trace, upto, running)
            pv = views.plot_views(trace, upto)
            curve, hw = hardware.panel(trace, pairs)
            out = ([tv[f"{k}_{m}"] for k in ("stats", "text") for m in ("ar", "sequoia", "lookahead")]
                    + [pv[k] for k in ("tree", "window", "pool", "pool_size", "latency", "cumulative")]
                    + [html.summary_html(trace, trace.steps_done(upto)) if trace else "", trace,
                       gr.Slider(minimum=0, maximum=max(total, 1), value=upto, step=1),
                       views.step_caption(trace, upto),
                       trace_files.write(trace) if (trace and with_file) else None,
                       hw, curve, status_text if status_text is not None else gr.skip()])
            return out

        # The parameter names are the HTTP API's (`/race`): keep them plain and documented in the README.
        def race(prompt, methods, model, custom_target, custom_draft, dtype, max_new_tokens, temperature, top_p,
                 seed, tree, tree_budget, tree_depth, lookahead, window, ngram, guesses, pool_from_prompt,
                 request: gr.Request = None):
            session = getattr(request, "session_hash", None) or "local"
            prune_session_config(demo, session)   # what the last run's final view left behind
            control = RaceControl() if gpu is None else None   # across ZeroGPU's process boundary: GC frees
            if control is not None:
                controls[session] = control
            skip = [gr.skip()] * len(full_outputs)
            last_text = last_plot = 0.0
            trace = events = None
            captioned = False
            failure = None
            values = (prompt, methods, model, custom_target, custom_draft, dtype, max_new_tokens, temperature,
                      top_p, seed, tree, tree_budget, tree_depth, lookahead, window, ngram, guesses,
                      pool_from_prompt)
            runner = slot.get() if slot is not None else None
            try:
                if runner is not None:
                    events = worker_race_events(runner, limits, control, *values)
                else:
                    events = compute(control, *values)
                    if slot is not None and slot.failed:
                        yield status_only(f"Decoding in the app's own process: the worker could not start "
                                          f"({slot.failed}). Speeds may be lower than standalone.")
                for event in events:
                    if control is not None and control.stop.is_set():
                        return   # Stop has rendered the final view; a late yield must not overwrite it
                    if event[0] == "status":
                        yield status_only(event[1])
                        continue
                    _, trace, done = event
                    if done:
                        break
                    now = time.monotonic()
                    if now - last_text < TEXT_INTERVAL_S:
                        continue   # the next update carries these tokens too
                    last_text = now
                    out = list(skip)
                    tv = views.text_views(trace, None, running=True)
                    out[:6] = [tv[f"{k}_{m}"] for k in ("stats", "text") for m in ("ar", "sequoia", "lookahead")]
                    if now - last_plot >= LIVE_VIEW_INTERVAL_S:
                        last_plot = now
                        pv = views.plot_views(trace, live=True)
                        out[6:12] = [pv[k] for k in ("tree", "window", "pool", "pool_size", "latency", "cumulative")]
                    out[13] = trace   # kept server-side: Stop and replay see the run so far
                    if not captioned:   # the step-through waits for the race; say so once, not per update
                        captioned = True
                        out[15] = narrate.racing_caption_html()
                    yield out
            except SpecVizError as exc:
                failure = str(exc)
            except WorkerUnavailable as exc:
                slot.discard()   # the next run starts a fresh worker
                failure = f"the decoding worker stopped unexpectedly ({exc}); the next run starts a new one"
            except WorkerRunFailed as exc:
                failure = f"the run failed: {exc}"
            except Exception as exc:   # e.g. out of memory while loading: report it, keep the app up
                if isinstance(exc, WorkerOutOfMemory) or is_out_of_memory(exc):
                    pairs.clear()   # drop loaded weights too: the next run reloads what it needs
                    free_accelerator_memory()
                    failure = ("out of memory while loading or preparing the models; the server freed "
                               "its memory: try a smaller model pair or fewer new tokens")
                else:
                    traceback.print_exc()   # not a user's mistake: the server's log keeps where it happened
                    failure = f"the run failed: {type(exc).__name__}: {exc}"
            finally:
                prune_session_config(demo, session)   # this run's streamed (skipped) figures
                if events is not None:
                    events.close()   # runs the race's `finally`: caches freed now, not at garbage collection
                    release_freed_memory()
                if controls.get(session) is control:
                    controls.pop(session, None)
            if failure is not None:
                if control is not None and control.stop.is_set():
                    return   # Stop has rendered the final view; a late failure must not overwrite it
                # The status line says it too: a "Loading …" line must not outlive the load that failed, nor
                # the caption a race that never finished.
                out = status_only(f"⚠ {failure}")
                out[15] = views.step_caption(trace, len(trace.order)) if trace is not None else ""
                yield out
                raise gr.Error(failure, print_exception=False)
            if trace is not None:
                message = ("Stopped early (this server's time limit per run)." if trace.cancelled else
                           "Done. Scrub the replay below or download the trace.")
                yield full_view(trace, status_text=message + contention_note(trace))

        def stop(trace, request: gr.Request = None):
            session = getattr(request, "session_hash", None) or "local"
            control = controls.pop(session, None)
            if control is not None:
                control.close()
            if trace is None:
                return status_only("Stopped.")
            return full_view(trace, status_text="Stopped. The run so far is kept for replay.")

        def show_step(trace, upto):
            if trace is None:
                return [gr.skip()] * len(full_outputs)
            out = full_view(trace, upto, with_file=False)
            # Only the step-dependent views change; the state, file, hardware panel and status stay.
            for i in (13, 16, 17, 18, 19):
                out[i] = gr.skip()
            return out

        def shift(trace, upto, delta):
            if trace is None:
                return [gr.skip()] * len(full_outputs)
            return show_step(trace, max(0, min(len(trace.order), int(upto or 0) + delta)))

        def load_trace(path):
            if not path:
                return [gr.skip()] * len(full_outputs)
            try:
                raw = Path(path).read_bytes()
                trace = RaceTrace.from_json(raw, max_bytes=limits.max_trace_bytes)
            except SpecVizError as exc:
                raise gr.Error(str(exc), print_exception=False) from None
            except OSError as exc:
                raise gr.Error(f"could not read the uploaded file: {exc}", print_exception=False) from None
            return full_view(trace, with_file=False,
                             status_text=f"Replaying an uploaded trace: {len(trace.order)} steps, "
                                         f"{', '.join(trace.methods)} on {trace.target_name or 'unknown model'}.")

        inputs = [prompt, methods, preset, custom_target, custom_draft, dtype, max_new, temperature, top_p, seed,
                  tree_mode, budget, depth, look_mode, window, ngram, guesses, pool_from_prompt]
        # No progress overlay: Gradio animates a spinner and a timer on every output for the
        # whole race, which alone kept a same-machine browser's renderer busy; the status
        # line and the streaming columns show progress instead.
        run_event = run_btn.click(race, inputs, full_outputs, api_name="race", concurrency_limit=1,
                                  concurrency_id="race", show_progress=os.environ.get("SPECVIZ_PROGRESS", "hidden"))
        stop_btn.click(stop, [trace_state], full_outputs, cancels=[run_event], api_name="stop", queue=False)
        step_slider.release(show_step, [trace_state, step_slider], full_outputs, api_name="show_step",
                            show_progress="hidden")
        # Not queued: stepping (also by the arrow keys) answers at once, even while another race runs.
        prev_btn.click(lambda t, s: shift(t, s, -1), [trace_state, step_slider], full_outputs, api_name="prev",
                       show_progress="hidden", queue=False)
        next_btn.click(lambda t, s: shift(t, s, 1), [trace_state, step_slider], full_outputs, api_name="next",
                       show_progress="hidden", queue=False)
        load_event = upload.upload(load_trace, [upload], full_outputs, api_name="load_trace")

        # Workshop mode: the what-if panel follows the sliders, an uploaded profile and each new trace.
        wi_inputs = [trace_state, wi_budget, wi_depth, wi_window, wi_ngram, wi_guesses, profile_state]

        def what_if(trace, n, d, w, ngram, g, profile):
            try:
                return whatif.panel_html(trace, int(n), int(d), int(w), int(ngram), int(g), profile)
            except Exception as exc:   # a prediction must never break the page
                return f'<div style="color:#b91c1c">the prediction failed: {html.esc(str(exc))}</div>'

        def load_profile(path):
            if not path:
                return None, "Costs: this machine's (or this run's) measured t(n)."
            try:
                profile = whatif.load_profile(path)
            except SpecVizError as exc:
                raise gr.Error(str(exc), print_exception=False) from None
            return profile, f"Costs: the uploaded profile ({profile['name']}), {len(profile['target_ms'])} sizes."

        def sync_sliders(trace):
            """Start the what-if sliders at the sizes the run actually used."""
            out = [gr.skip()] * 5
            for m, names in (("sequoia", ("tree_budget", "tree_depth")), ("lookahead", ("window", "ngram", "guesses"))):
                run = trace.runs.get(m) if trace else None
                settings = run.settings if run is not None and isinstance(run.settings, dict) else {}
                for name in names:
                    value = settings.get(name)
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        i = ("tree_budget", "tree_depth", "window", "ngram", "guesses").index(name)
                        out[i] = int(value)
            return out

        wi_sliders = [wi_budget, wi_depth, wi_window, wi_ngram, wi_guesses]
        for event in (run_event, load_event):
            event.then(sync_sliders, [trace_state], wi_sliders, api_visibility="private", queue=False).then(
                what_if, wi_inputs, whatif_html, api_visibility="private", queue=False)
        for slider in wi_sliders:
            slider.release(what_if, wi_inputs, whatif_html, api_visibility="private", queue=False,
                           show_progress="hidden")
        wi_profile.upload(load_profile, [wi_profile], [profile_state, wi_note], api_visibility="private").then(
            what_if, wi_inputs, whatif_html, api_visibility="private", queue=False)
        wi_profile.clear(load_profile, [wi_profile], [profile_state, wi_note], api_visibility="private").then(
            what_if, wi_inputs, whatif_html, api_visibility="private", queue=False)

        def apply_workshop(name, current_pair):
            preset_values = WORKSHOP.get(name)
            if preset_values is None:
                return [gr.skip()] * 11 + [gr.Markdown("", visible=False)]
            # A preset may pick the model pair too, when this server offers it; otherwise the pair stays,
            # unless it is a draft another preset picked: then the default pair comes back.
            model = preset_values.get("model")
            if model is None and current_pair in (FEATURE_PRESET, INDEPENDENT_PRESET):
                model = DEFAULT_PRESET
            model = model if model in presets else gr.skip()
            tree = preset_values.get("tree", "illustrative")
            look = preset_values.get("lookahead", "illustrative")
            sizes = {**whatif.ILLUSTRATIVE_TREE, **whatif.ILLUSTRATIVE_LOOKAHEAD}
            sizes.update({k: preset_values[k] for k in sizes if k in preset_values})
            return [model, preset_values["prompt"], preset_values["temperature"], preset_values["max_new_tokens"], tree,
                    sizes["tree_budget"], sizes["tree_depth"], look, sizes["window"], sizes["ngram"],
                    sizes["guesses"],
                    gr.Markdown(f"**Question.** {preset_values['question']}", visible=True)]

        workshop.change(apply_workshop, [workshop, preset], [preset, prompt, temperature, max_new, tree_mode, budget, depth,
                                                  look_mode, window, ngram, guesses, question],
                        api_visibility="private", queue=False)
        for button, text in zip(example_buttons, EXAMPLES.values()):
            button.click(lambda t=text: t, None, prompt, api_visibility="private", queue=False)
        preset.change(lambda p: gr.Row(visible=p == CUSTOM), preset, custom_row, api_visibility="private",
                      queue=False)

    demo.queue(max_size=limits.queue_size, default_concurrency_limit=1)
    demo.specviz_worker_slot = slot   # for the tests and for whoever embeds the app: None = in-process
    if slot is not None:
        close_server = demo.close

        def close(*args, **kwargs):   # the worker ends with the app, not only at interpreter exit
            slot.close()
            return close_server(*args, **kwargs)

        demo.close = close
    return demo


def launch_kwargs() -> dict:
    """What `launch()` needs besides host and port (Gradio 6 takes css/theme there)."""
    # System fonts only: no font download (workshop laptops and CI are often offline).
    sans = ["Inter", "ui-sans-serif", "system-ui", "Segoe UI", "Arial", "sans-serif"]
    mono = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"]
    return {"css": CSS, "theme": gr.themes.Soft(font=sans, font_mono=mono), "head": KEYS_JS}


def contention_note(trace: RaceTrace) -> str:
    """A warning when the race's forwards ran far slower than this machine's profiled t(n)."""
    from ..engine.race import CONTENDED_RATIO, forward_slowdown

    curve = hardware.target_curve(hardware.plans_for(trace))
    slowdown = forward_slowdown(trace.runs.values(), curve)
    if slowdown is None or slowdown < CONTENDED_RATIO:
        return ""
    return (f" ⚠ The target's forwards ran {slowdown:.1f}x slower than this machine runs them undisturbed: "
            "something else was using the processor (another program, or a busy browser tab on the same "
            "machine), so the speeds above are lower than the decoders' own and their ratios may be off.")

"""What the page says and offers: example prompts, workshop presets, sizing choices, CSS, keyboard script.

Plain data, no components: `controls` builds the page from it, `handlers` applies a
workshop preset from it. The model pairs and the settings' ranges are the race
request's (`specviz.request`), shared with the HTTP API and the command line.
"""

from __future__ import annotations

import json
import os

from .. import glossary
from ..request import FEATURE_PRESET, ILLUSTRATIVE_LOOKAHEAD, ILLUSTRATIVE_TREE
from . import narrate, whatif

REPEATING_PROMPT = "Write a song whose chorus, 'Row, row, row your boat down the river', is sung after every verse."
EXAMPLES = {
    "chat": "What are three tips for giving a good talk?",
    "code": "Write a Python function that checks whether a string is a palindrome.",
    "math": "A train travels 120 km in 1.5 hours. What is its average speed in km/h? Explain step by step.",
    "story": "Tell a short story about a robot who learns to paint.",
    "repeats itself": REPEATING_PROMPT,
}
# Streaming rates, chosen so a browser on the same machine stays nearly idle (issue 12): texts about 7 times a
# second (each update carries every step since the last), the views (inline SVG/HTML, see svg.py) once a second.
# Measured with scripts/app_speed.py on 2 cores: at 12/s and 2/s the renderer took 38% of a core and Lookahead
# showed 0.84x its standalone speed; at these rates 31% and 0.98x.
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
    f"tree of {ILLUSTRATIVE_TREE['tree_budget']} nodes over {ILLUSTRATIVE_TREE['tree_depth']} levels "
    f"and a window of W = {ILLUSTRATIVE_LOOKAHEAD['window']}, N = {ILLUSTRATIVE_LOOKAHEAD['ngram']} "
    f"(3 levels), G = {ILLUSTRATIVE_LOOKAHEAD['guesses']}: one target forward over 20 and 27 tokens per "
    "step instead of a handful, so on a CPU it is usually slower than *fastest* — the *What if* panel below "
    "shows by how much on this machine. **adaptive** grows each step's tree from the draft's own confidence "
    "(EAGLE-2's dynamic tree): deep where the draft is sure, short where it hesitates, so the shape changes "
    "from step to step; still exact.")
# Workshop presets: prompt, sizes, temperature and precision together, with one guiding question each.
# Every preset names its precision and its sizes (the page states them beside the question), so that what the
# room sees does not depend on what `auto` measured that day: `docs/workshop-figures.md`, which the guide
# quotes, is generated from these settings by `scripts/workshop_presets.py`. A preset that asks whether the
# texts are identical races in fp32, where greedy speculation is exact token for token (in bf16 or q4 a batched
# forward may round a near-tie the other way, and the page then says where the texts part); the sampled preset
# it is compared with does too, so their trees differ by temperature alone. The others race in q4, wherever a
# 4-bit kernel runs (SpecViz's, else torch's int4 one); where none does, a GPU Space, they race in `auto`'s
# precision, and the page says so (`preset_settings`). The adaptive tree's node limit is the one size left to
# the machine: it is that preset's lesson.
SLOW_FAST_PROMPT = EXAMPLES["math"]   # the suite where the q4 race wins most (bench: Sequoia 1.44x `ar`)
ILLUSTRATIVE = dict(tree="illustrative", lookahead="illustrative")
SLOW_FAST_TREE = dict(tree="manual", tree_budget=6, tree_depth=4, lookahead="manual", window=2, ngram=3, guesses=2)
WORKSHOP = {
    "Repetitive text: where Lookahead's guesses come true": dict(
        # The offline default sings this chorus over and over for 64 tokens and more (a list to "repeat three
        # times" it wrote once and ended, 16 tokens: nothing left for the pool to win).
        prompt=REPEATING_PROMPT, temperature=0.0, max_new_tokens=64, dtype="q4", **ILLUSTRATIVE,
        question="After the chorus's first line, how many tokens does one Lookahead step write? Step to such "
                 "a step: did those tokens come from the window, from the pool or from a copy of the text, and who "
                 "put them there?"),
    "Code: what does a small draft get right?": dict(
        prompt=EXAMPLES["code"], temperature=0.0, max_new_tokens=64, dtype="q4", **ILLUSTRATIVE,
        question="Step through Sequoia: which tokens does the draft get accepted — keywords, punctuation and "
                 "indentation, or names? Why would that be?"),
    "Open chat, greedy (T = 0)": dict(
        prompt=EXAMPLES["chat"], temperature=0.0, max_new_tokens=48, dtype="fp32", **ILLUSTRATIVE,
        question="Note Sequoia's tokens per forward and check the three texts are identical (this preset runs "
                 "in fp32, where greedy speculation is exact token for token; on a CPU fp32 is slower than the "
                 "default q4, so read tokens per forward rather than speed). Will the T = 1.0 preset keep "
                 "them identical — and will its tree accept as much?"),
    "Open chat, sampled (T = 1.0)": dict(
        prompt=EXAMPLES["chat"], temperature=1.0, max_new_tokens=48, dtype="fp32", **ILLUSTRATIVE,
        question="The texts now differ from autoregressive, yet the method is exact. Step to a Sequoia rejection: "
                 "read its q and P — where did the bonus token come from, and why does that keep the output exact?"),
    "A draft that reads the target's hidden states": dict(
        model=FEATURE_PRESET,
        prompt=EXAMPLES["code"], temperature=0.0, max_new_tokens=48, dtype="q4", **ILLUSTRATIVE,
        question="Hover a level-1 node, then a level-3 node: what did the draft read for each? Does its "
                 "acceptance fall with depth as it feeds on its own predictions? Then pick *Model pair → "
                 "+ independent draft* (a 4-layer model of its own) and race again: which draft writes more "
                 "tokens per forward, and which is faster?"),
    "A tree that follows the draft's confidence": dict(
        prompt=EXAMPLES["code"], temperature=0.0, max_new_tokens=64, dtype="q4", tree="adaptive",
        lookahead="illustrative",
        question="Step through Sequoia: where does the adaptive tree grow deep, and where does it stay short and "
                 "wide? Read the q of its first level in each case: what does the draft's confidence predict?"),
    "A tree too big for this hardware": dict(
        prompt=EXAMPLES["story"], temperature=0.0, max_new_tokens=48, dtype="q4", tree="manual", tree_budget=96,
        tree_depth=8, lookahead="illustrative",
        question="Tokens per forward go up with a huge tree — do tokens per second? Open *What if*: where does "
                 "the predicted speedup peak on this machine, and where would it peak on a GPU?"),
    "A slow target: the same race in bf16": dict(
        prompt=SLOW_FAST_PROMPT, temperature=0.0, max_new_tokens=64, dtype="bf16", **SLOW_FAST_TREE,
        question="Note Sequoia's tokens per forward and its speedup, and in the hardware panel the draft-cost ratio "
                 "c (a draft level's time over one target forward). Then race the next preset, the same tree over "
                 "the fast 4-bit target: which of the two numbers changes, and why?"),
    "A fast target: the same race in q4": dict(
        prompt=SLOW_FAST_PROMPT, temperature=0.0, max_new_tokens=64, dtype="q4", **SLOW_FAST_TREE,
        question="The same prompt and tree as the bf16 preset, over a target whose forward is several times faster. "
                 "Tokens per forward are nearly the same — is the speedup? Read α, γ and c in the hardware panel: "
                 "what does (1 − α^(γ+1)) / ((1 − α)(γc + 1)) predict, and what did the race do?"),
}

# The presenter view (the page's "Presenter view" box, or `?presenter=1`): the body gets the class `sv-presenter`.
# For a projector at 1280 x 720 and up: the setup controls go (untick the box to change the race), every text is
# 18 px or more and grey text turns near-black, and the race columns, the stepper, the tree and the step caption
# share one screen, the summary under them. Sizes in vh so 1920 x 1080 gets the same screen, larger.
PRESENTER_CSS = """
body.sv-presenter { --text-xxs: 18px; --text-xs: 18px; --text-sm: 18px; --text-md: 20px; --text-lg: 22px;
  --text-xl: 26px; --text-xxl: 30px; --block-label-text-size: 18px; --block-info-text-size: 18px;
  --block-title-text-size: 18px; --section-header-text-size: 20px; --checkbox-label-text-size: 20px;
  --button-large-text-size: 22px; --button-small-text-size: 20px; --input-text-size: 20px; --layout-gap: 6px; }
body.sv-presenter .sv-title, body.sv-presenter .sv-setup, body.sv-presenter .sv-legend-block { display: none !important; }
body.sv-presenter .gradio-container { padding-top: 4px !important; padding-bottom: 4px !important; }
body.sv-presenter .gradio-container :is(div, span, p, label, td, th, li, b, strong, em, code, button, input, a,
  small, textarea, select, summary) { font-size: max(20px, 2.1vh) !important; }
body.sv-presenter .sv-stats :is(.sv-method-name, .sv-stat-value) { font-size: max(26px, 2.7vh) !important; }
body.sv-presenter :is([style*="color:#6b7280"], [style*="color:#4b5563"], [style*="color:#9ca3af"],
  [style*="color: #6b7280"]) { color: #111827 !important; }
/* One screen: the column headers on one line of three numbers (tokens and time are in the summary), the texts
   short and scrolled, the stepper without its heading (the caption says which step), the tree and the caption
   sized to what is left of the screen. */
body.sv-presenter #sv-measuring:not(:has(.sv-measuring)), body.sv-presenter #sv-slider .head { display: none !important; }
body.sv-presenter .sv-stats > div:last-child > div:nth-child(n+4) { display: none !important; }
body.sv-presenter .sv-stats { padding: 2px 4px !important; }
body.sv-presenter #sv-status { max-height: 34px; overflow-y: auto; }
body.sv-presenter .sv-stats * { line-height: 1.2 !important; }
body.sv-presenter #sv-tree .sv-view-note { display: none; }
body.sv-presenter .sv-text { min-height: 0 !important; height: 14vh; max-height: 14vh !important;
  line-height: 1.35 !important; padding: 2px 8px !important; }
body.sv-presenter #sv-stepper { min-height: 0; }
body.sv-presenter #sv-stepper button { max-height: 40px; }
body.sv-presenter #sv-tree svg { max-height: calc(100vh - 520px) !important; min-height: 190px; }
body.sv-presenter .sv-ran { font-size: 18px !important; }
/* The tree's labels in drawing units (svg.PRESENTER_LABEL_PX, whose width the tree leaves room for): 22 of them are
   18 px on screen when a 240-unit-high tree is drawn 200 px high. */
body.sv-presenter #sv-tree svg text { font-size: 22px; }
body.sv-presenter #sv-tree svg .sv-bonus text:first-child { font-size: 26px; }
body.sv-presenter #sv-caption { max-height: calc(100vh - 450px); overflow-y: auto; contain-intrinsic-size: none; }
body.sv-presenter #sv-caption .sv-caption { line-height: 1.35; }
body.sv-presenter #sv-summary { order: 20; }
/* The preset's question shows in presenter view only (the page shows it under the prompt), in two lines at most;
   the measurement of this machine, while it runs, floats in a corner instead of pushing the tree off the screen.
   Gradio copies each rule under `.gradio-container .contain`, which would outrank a presenter rule that shows the
   question again: so the rule hides it only where the body is not in presenter view, which no copy can match. */
body:not(.sv-presenter) #sv-question-presenter { display: none !important; }
body.sv-presenter:has(#sv-question-presenter:not(.hidden) p) .sv-text { height: 9vh; max-height: 9vh !important; }
body.sv-presenter #sv-question-presenter { max-height: calc(2.7em + 6px); overflow-y: auto;
  background: #eff6ff; border-left: 4px solid #2563eb; padding: 2px 10px !important; }
body.sv-presenter #sv-question-presenter p { margin: 0 !important; }
body.sv-presenter #sv-measuring:has(.sv-measuring) { position: fixed; right: 8px; bottom: 8px; z-index: 50;
  width: min(34vw, 460px); max-height: 28vh; overflow-y: auto; background: #fff; border: 1px solid #d1d5db;
  border-radius: 6px; box-shadow: 0 2px 8px rgba(0,0,0,.15); padding: 4px 8px; }
"""
CSS = """
.sv-col { min-width: 0; }
.sv-col:has(.sv-unraced) { display: none !important; }
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
""" + narrate.CAPTION_CSS + whatif.WHATIF_CSS + PRESENTER_CSS


# Run once the page has loaded (Gradio's launch `js`; a `js` on the button's click did not fire): on ▶ Start race
# the race comes into view at once, the button row at the top of the screen with the status line, the legend
# and the three columns with their live numbers under it. At 1280 x 720 the controls above would otherwise
# leave the columns below the first screen, and a projected room would see nothing happen.
PAGE_JS = r"""
() => {
  // The presenter view: as the address asks at once (before the page's own load event sets the box), then as
  // the box says, kept in the address so that a reload or a copied link opens the same view.
  var presenting = function (on) {
    document.body.classList.toggle('sv-presenter', !!on);
    var url = new URL(window.location.href);
    if (on) url.searchParams.set('presenter', '1'); else url.searchParams.delete('presenter');
    window.history.replaceState(null, '', url);
  };
  if (['1', 'true', 'yes', 'on'].includes((new URLSearchParams(window.location.search).get('presenter') || '').toLowerCase()))
    document.body.classList.add('sv-presenter');
  document.addEventListener('change', function (e) {
    var box = e.target && e.target.closest && e.target.closest('#sv-presenter');
    if (box && e.target.type === 'checkbox') presenting(e.target.checked);
  }, true);
  // Gradio's own labels (sliders, numbers) get the glossary's definition on hover, as the page's HTML has it.
  var terms = %s;
  document.addEventListener('mouseover', function (e) {
    var label = e.target && e.target.closest && e.target.closest('label, [data-testid="block-info"], th');
    if (!label || label.title) return;
    var text = (label.innerText || '').trim().toLowerCase().replace(/\s+/g, ' ');   // as glossary.normalized reads it
    var hover = terms[text] || terms[text.replace(/\s+\([^)]*\)\s*$/, '')];
    if (hover) label.title = hover;
  });
  document.addEventListener('click', function (e) {
    var start = e.target && e.target.closest && e.target.closest('#sv-run');
    if (!start) return;
    (start.closest('.row') || start).scrollIntoView({block: 'start', behavior: 'instant'});
  }, true);
}
""" % json.dumps(glossary.hover_map(), ensure_ascii=False)

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

"""What the page says and offers: example prompts, workshop presets, sizing choices, CSS, keyboard script.

Plain data, no components: `controls` builds the page from it, `handlers` applies a
workshop preset from it. The model pairs and the settings' ranges are the race
request's (`specviz.request`), shared with the HTTP API and the command line.
"""

from __future__ import annotations

import os

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
    f"tree of {ILLUSTRATIVE_TREE['tree_budget']} nodes over {ILLUSTRATIVE_TREE['tree_depth']} levels "
    f"and a window of W = {ILLUSTRATIVE_LOOKAHEAD['window']}, N = {ILLUSTRATIVE_LOOKAHEAD['ngram']} "
    f"(3 levels), G = {ILLUSTRATIVE_LOOKAHEAD['guesses']}: one target forward over 20 and 27 tokens per "
    "step instead of a handful, so on a CPU it is usually slower than *fastest* — the *What if* panel below "
    "shows by how much on this machine. **adaptive** grows each step's tree from the draft's own confidence "
    "(EAGLE-2's dynamic tree): deep where the draft is sure, short where it hesitates, so the shape changes "
    "from step to step; still exact.")
# Workshop presets: prompt + sizes + temperature (+ precision) together, with one guiding question each.
# A preset that asks whether the texts are identical races in fp32, where greedy speculation is exact token
# for token (in bf16, the CPU's 'auto', a batched forward may round a near-tie the other way, and the page
# then says where the texts part); the sampled preset it is compared with does too, so their trees differ by
# temperature alone. The others keep the page's 'auto' precision: on a CPU, fp32's multi-token forwards and
# full-precision draft cost about three times bf16's, which would hide what their questions ask about speed.
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
        prompt="What are three tips for giving a good talk?", temperature=0.0, max_new_tokens=48, dtype="fp32",
        tree="illustrative", lookahead="illustrative",
        question="Note Sequoia's tokens per forward and check the three texts are identical (this preset runs "
                 "in fp32, where greedy speculation is exact token for token; on a CPU fp32 is slower than the "
                 "default bf16, so read tokens per forward rather than speed). Will the T = 1.0 preset keep "
                 "them identical — and will its tree accept as much?"),
    "Open chat, sampled (T = 1.0)": dict(
        prompt="What are three tips for giving a good talk?", temperature=1.0, max_new_tokens=48, dtype="fp32",
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

# Run once the page has loaded (Gradio's launch `js`; a `js` on the button's click did not fire): on ▶ Start race
# the race comes into view at once, the button row at the top of the screen with the status line, the legend
# and the three columns with their live numbers under it. At 1280 x 720 the controls above would otherwise
# leave the columns below the first screen, and a projected room would see nothing happen.
PAGE_JS = """
() => {
  document.addEventListener('click', function (e) {
    var start = e.target && e.target.closest && e.target.closest('#sv-run');
    if (!start) return;
    (start.closest('.row') || start).scrollIntoView({block: 'start', behavior: 'instant'});
  }, true);
}
"""

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

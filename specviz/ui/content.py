"""What the page says and offers: example prompts, workshop presets, sizing choices, and its CSS and scripts
(`page_files`, from `static/`).

Plain data, no components: `controls` builds the page from it, `handlers` applies a
workshop preset from it. The model pairs and the settings' ranges are the race
request's (`specviz.request`), shared with the HTTP API and the command line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import glossary
from ..request import FEATURE_PRESET, ILLUSTRATIVE_LOOKAHEAD, ILLUSTRATIVE_TREE

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


STATIC = Path(__file__).resolve().parent / "static"


def page_files() -> dict:
    """The page's styles (`css`), its script (`js`, given the glossary's hover texts) and its keyboard script
    (`head`), as `static/` holds them."""
    terms = json.dumps(glossary.hover_map(), ensure_ascii=False)
    return {"css": (STATIC / "page.css").read_text(encoding="utf-8"),
            "js": (STATIC / "page.js").read_text(encoding="utf-8").replace("__TERMS__", terms),
            "head": (STATIC / "keys.html").read_text(encoding="utf-8")}

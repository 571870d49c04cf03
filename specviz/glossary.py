"""One word per idea: every measurement and size the page, `bench`, the HTTP API and the docs name, defined once.

The page's labels carry these definitions on hover, `bench` prints them under its table, `docs/glossary.md` is
written from them (`python -m specviz.glossary > docs/glossary.md`; a test checks it is current), and a test fails
when a label, a table column or an API field names a measurement this module does not define.

Two counts that are easy to mix up (EAGLE's and Lookahead's trackers ask about exactly this):
*accepted length* counts the target's own token, so it is 1 for autoregressive decoding and never below 1;
*acceptance rate* is per drafted token, a share between 0 and 1 that the target's own token is no part of.
"""

from __future__ import annotations

import html
import json
import re
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    name: str            # the word used everywhere (labels, columns, docs), lower case
    definition: str
    symbol: str = ""     # the letter a formula or a slider uses for it (n, d, W, N, G)
    field: str = ""      # its name in JSON (the HTTP API, `bench --json`, traces)
    aliases: tuple[str, ...] = ()   # older JSON names for it, kept so saved runs and scripts still read
    # What the field calls the same idea (papers, other tools): listed on the glossary page for a reader who
    # meets them elsewhere, never a spelling a label, column or field of ours may use.
    elsewhere: tuple[str, ...] = ()


TERMS: tuple[Term, ...] = (
    Term("tokens", "New tokens a method wrote (the prompt's tokens are not counted).", field="tokens",
         aliases=("new_tokens",)),
    Term("time", "A method's wall time over its steps, the prompt's forward included, in seconds.",
         field="wall_seconds"),
    Term("tokens/s", "Tokens per second: tokens ÷ time.", field="tokens_per_second"),
    Term("speedup", "A method's tokens/s ÷ autoregressive's tokens/s on the same prompt in the same run "
         "(bench: per prompt, then the median). Above 1 is faster than autoregressive.", field="speedup",
         aliases=("speedup_vs_ar",)),
    Term("step", "One target forward of one method and the tokens it commits: autoregressive's writes 1 token, "
         "Sequoia's its tree's accepted path + 1, Lookahead's an accepted n-gram + 1. A method's first step is "
         "the prompt's forward (prefill), which writes 1 token."),
    Term("global step", "One step of any method, in the order the race ran them (the methods take turns of a few "
         "forwards, the one with the least compute so far first); the page's stepper counts these."),
    Term("target forwards", "Forwards of the target model a method ran, the prompt's included: one per step.",
         field="target_forwards"),
    Term("tokens per forward", "tokens ÷ target forwards, the prompt's forward included. Autoregressive's is "
         "1.00; a speculative method's is what its speculation buys per forward of the big model.",
         field="tokens_per_forward", elsewhere=("compression ratio (the Lookahead paper)",)),
    Term("accepted length", "Tokens committed per step after the prompt's forward, counting the target's own "
         "token (the bonus or corrected one): 1 + the speculated tokens the target accepted. Autoregressive's "
         "is 1, never less. It reads a little above tokens per forward, which also counts the prompt's "
         "forward and its single token. The what-if panel predicts it from the acceptance rates.",
         field="accepted_length", elsewhere=("τ, mean accepted tokens (EAGLE, Medusa, Spec-Bench)",
                                             "acceptance length")),
    Term("acceptance rate", "Per speculated token: the chance that the target accepts a speculated token it "
         "tests (a draft's guess, a copied or an n-gram token), measured as the share of the tested ones it "
         "accepted, between 0 and 1. Tokens no test reached (under a rejected one) are not counted, nor is the "
         "target's own token (unlike accepted length). For a chain of γ guesses each accepted with rate α, the "
         "expected accepted length is (1 - α^(γ+1)) / (1 - α).", symbol="α",
         elsewhere=("α (Leviathan et al.)", "acceptance probability")),
    Term("acceptance vector", "Sequoia's acceptance rates by rank, as the chance of each outcome at a node the "
         "walk reached: entry k is the share of such nodes where the draft's k-th choice was the child accepted "
         "(counts ÷ nodes, so the entries sum to at most 1; the rest is every child rejected). Entry 1 is the "
         "acceptance rate of the draft's first choice; entry k > 1 is smaller than the rate of a k-th choice "
         "once it is tested, because it also counts the chance that the better ones were rejected first. "
         "Sequoia's tree shape is the best one for it; measured by depth too, acceptance once a depth is "
         "reached can rise with depth even as the chance of reaching it falls.", field="acceptance",
         elsewhere=("p (Sequoia)",)),
    Term("speculated share", "The share of a method's tokens that came from speculation (Sequoia's draft tree, "
         "Lookahead's window or pool) rather than from the target's own prediction.", field="speculated_share"),
    Term("tree budget", "The nodes of Sequoia's tree, its root included (the root is the last token already "
         "committed): a budget of n has the target verify n tokens in one forward and the draft propose n - 1.",
         symbol="n", field="tree_budget", elsewhere=("tree size (Sequoia)", "total tokens (EAGLE-2)")),
    Term("tree depth", "The most levels of drafted tokens under the root of Sequoia's tree; a tree of depth d "
         "costs d draft forwards per step and can write at most d + 1 tokens.", symbol="d", field="tree_depth",
         elsewhere=("γ, draft length, for a chain (Leviathan et al.)", "num_assistant_tokens (transformers)")),
    Term("window", "Lookahead's W: how many future positions its Jacobi window guesses at once.", symbol="W",
         field="window", elsewhere=("window size W (the Lookahead paper)",)),
    Term("n-gram", "Lookahead's N: the length of the n-grams it harvests and verifies (its window keeps N - 1 "
         "levels of guesses).", symbol="N", field="ngram"),
    Term("guesses", "Lookahead's G: how many n-grams from its pool it verifies in each step.", symbol="G",
         field="guesses", elsewhere=("G, verification candidates (the Lookahead paper)",)),
    Term("forward size", "Tokens the target processes in one forward of a step: 1 for autoregressive, the tree "
         "budget for Sequoia, the window's and the guesses' tokens for Lookahead.", field="forward_size"),
    Term("t(n)", "The target's forward time over n tokens at once, in ms, measured on this machine (the hardware "
         "panel's curve). t(1) is the cost of an autoregressive step; on a GPU t(n) stays flat far longer than on "
         "a CPU, which is why bigger trees and windows pay there."),
    Term("step time", "The wall time of one step, in ms: the draft's forwards, the target's forward and the work "
         "between them (verification, caches, the trace).", field="step_ms"),
    Term("draft-cost ratio", "c: the time a speculative step spends on one level of guessing (a draft forward "
         "and its draws; for Lookahead, nothing but its share of the forward) ÷ t(1), the target's one-token "
         "forward. With acceptance rate α, γ guesses in a chain and a verification that costs what t(1) does, "
         "the expected speedup is (1 - α^(γ+1)) / ((1 - α)(γc + 1)) (Leviathan et al.): a small c is what lets "
         "speculation pay, and on a CPU, where t(n) grows with n, the verification's own growth counts too.",
         symbol="c", elsewhere=("c, cost coefficient (Leviathan et al.)",)),
    Term("ms per token", "Step time ÷ accepted length: the milliseconds one written token costs (the sizes "
         "`auto` weighs are ranked by it, lowest first).", field="ms_per_token"),
    Term("predicted speedup", "The speedup the what-if panel and `auto` sizes expect: accepted length × t(1) ÷ "
         "step time, from the acceptance rates and this machine's measured costs.", field="predicted_speedup"),
    Term("max new tokens", "The most tokens each method may write for the prompt; it may stop sooner at the end "
         "of the text.", field="max_new_tokens"),
    Term("capture", "Time spent capturing CUDA graphs before the timed run (warm-up included), in ms; left out of "
         "tokens/s.", field="capture_ms"),
    Term("identical to ar", "Greedy output equal to autoregressive's token for token (exact in fp32). Sampled "
         "output is not compared: it follows the same distribution, not the same text.", field="identical_to_ar",
         aliases=("same_as_ar",)),
    Term("agreement with ar", "Greedy, where output may differ from autoregressive's (bf16, q4, int8, llama.cpp's "
         "peers): the leading tokens equal to autoregressive's, up to the first that differs, out of "
         "autoregressive's tokens (`bench` prints it per prompt).", field="agreement_with_ar"),
    Term("q4", "A precision (`--dtype q4`, CPU, offline default only): every layer's linears run the 4-bit "
         "weights the model's GGUF ships (Q4_1, blocks of 32 as d·q + m). Where the CPU has AVX-512 VNNI they run "
         "on SpecViz's own kernel, llama.cpp's recipe: each product's input rounded to int8 in blocks of 32 but "
         "for its few largest positions, kept exact; the head runs the GGUF's Q8_0 codes the same way, and "
         "every row's bits are its own, so greedy speculation writes q4 autoregressive's text. Elsewhere they run "
         "on torch's int4 kernel, inputs rounded to bf16, the head dense. Norms, attention and the cache run in "
         "fp32. Not exact against fp32: greedy agreement with fp32 is reported, as for bf16."),
    Term("int8", "A precision (`--dtype int8`, CPU, Llama-family models: Llama, Qwen2): every layer's linears in "
         "weight-only int8, one scale per output row, on torch's int8 kernel, each product's input rounded to bf16 "
         "for it; the rest as for q4. Half a bf16 model's bytes a token. Not exact: greedy agreement is reported."),
    Term("auto precision", "What `--dtype auto` runs on a CPU: q4 for the offline default from the first race "
         "wherever SpecViz's own 4-bit kernel is built and passes its self-test (the measurement confirms it, never "
         "flips it); elsewhere the precision (fp32, bf16, q4 or int8) whose target "
         "forward this machine measured fastest (the geometric mean of one row's and a 16-row verification's), "
         "measured once per CPU, thread count and torch version. The summary line says which ran and why; until "
         "it is measured, and on a GPU, the rule: bf16 where the hardware has bf16 kernels, else fp32 (fp16 on a "
         "GPU older than Ampere).", field="precision_choice"),
)
# The ideas a learner meets on the page and in the guide: no measurement or size, so no label spells them.
CONCEPTS: tuple[Term, ...] = (
    Term("target", "The model whose output is wanted (here SmolLM2-135M): every token written is one it would "
         "write, and it checks every guess.", elsewhere=("verifier", "main model")),
    Term("draft", "A smaller, faster model that guesses the target's next tokens (Sequoia's: a small "
         "independent model, or an EAGLE-style head that reads the target's hidden state).",
         elsewhere=("drafter", "assistant model (transformers)", "speculator", "SSM")),
    Term("speculative decoding", "Guessing several tokens cheaply, then having the target check them all in one "
         "forward; the guesses it accepts are tokens written for the price of one forward.",
         elsewhere=("speculative sampling", "assisted generation (transformers)")),
    Term("lossless", "A speculative method whose output is exactly the target's: greedy, the same text token for "
         "token; sampled, the same distribution (not the same text). Both of SpecViz's are, and its tests prove "
         "it.", elsewhere=("exact",)),
    Term("prefill", "The first forward, over the whole prompt at once: it fills the KV cache and writes one "
         "token. Every method's first step."),
    Term("KV cache", "The keys and values of every token so far, kept per layer so a forward over new tokens "
         "attends to the old ones without recomputing them; a rejected guess's entries are dropped."),
    Term("tree attention", "One forward over a whole tree of guesses: each node attends to the prompt, the text "
         "so far and its own ancestors only (a mask), so every branch is checked as if it were alone.",
         elsewhere=("token tree verification (SpecInfer)",)),
    Term("bonus token", "The target's own token at the end of a step: after the last accepted guess, or in "
         "place of the first rejected one. A step always writes at least this one, so speculation never writes "
         "fewer tokens per forward than autoregressive decoding.", elsewhere=("correction token",)),
    Term("residual", "After a guess x is rejected at temperature > 0, the distribution the target still owes: "
         "normalise(max(P - q, 0)), P the target's and q the draft's. The next sibling is tested against it "
         "(min(1, P'/q') with q renormalised without x), and the bonus token is drawn from what is left after "
         "the last rejection; this is what keeps sampling exact.", elsewhere=("adjusted distribution",)),
    Term("Jacobi iteration", "Lookahead's way to guess without a draft: it feeds the target its own guesses for "
         "several future positions at once and replaces each with the target's prediction, over and over; the "
         "trajectories it leaves are harvested as n-grams.", elsewhere=("Jacobi decoding",)),
    Term("n-gram pool", "Lookahead's store of n-grams harvested from its Jacobi window (and here copied from the "
         "text), keyed by their first token; each step verifies the ones that follow the last written token.",
         elsewhere=("n-gram cache",)),
    Term("prompt lookup", "Guesses copied from the prompt and the text so far: where the text's last tokens "
         "occurred before, what followed them there. They cost no draft forward.",
         elsewhere=("prompt_lookup_num_tokens (transformers)", "lookup decoding (llama.cpp)")),
    Term("memory-bound", "A forward whose time is set by the bytes it reads (the weights, once per forward) over "
         "the memory's bandwidth: adding tokens to it costs almost nothing. One token's forward is memory-bound "
         "on a GPU, and on a CPU's 4-bit kernel nearly so."),
    Term("compute-bound", "A forward whose time is set by its arithmetic over the processor's peak: each added "
         "token costs its share. A CPU reaches this after a few tokens, a GPU only after dozens, which is why "
         "speculation's extra guesses cost more on a CPU."),
)
BY_NAME = {t.name: t for t in TERMS}
# Column and label words that name what ran or how it ran, not a measurement or a size: a table may use them freely.
NOT_MEASUREMENTS = frozenset({"suite", "method", "draft", "graphs", "note", "finish", "iqr", "prompt", "model pair",
                              "methods", "temperature", "top-p", "seed", "precision", "sequoia tree",
                              "lookahead sizes"})


def _spellings() -> dict[str, Term]:
    """The words a label may spell a term with, lower case: its name, "name symbol" ("tree budget n"),
    "symbol (name)" ("w (window)") and its JSON field names. A bare symbol is looked up as written (`SYMBOLS`):
    n is the tree budget, N the n-gram."""
    found: dict[str, Term] = {}
    for t in TERMS:
        named = (t.name, t.field, *t.aliases) + ((f"{t.name} {t.symbol}", f"{t.symbol} ({t.name})") if t.symbol else ())
        for spelling in filter(None, named):
            found.setdefault(spelling.lower(), t)
    return found


SPELLINGS = _spellings()
SYMBOLS = {t.symbol: t for t in TERMS if t.symbol}


def normalized(label: str) -> str:
    """A label as the glossary reads it: lower case, without what a label adds in brackets after the term
    ("Tree budget n (nodes incl. root)", "tokens/s (median, IQR)"); "W (window)" stays whole."""
    text = re.sub(r"\s+", " ", label.strip().lower())
    if re.fullmatch(r"[a-z] \([^)]*\)", text):
        return text
    return re.sub(r"\s+\([^)]*\)\s*$", "", text).strip(" :")


def find(label: str) -> Term | None:
    """The term a label, column or field spells (a plural too: "steps"), or None when the glossary does not
    define it."""
    if label.strip() in SYMBOLS:
        return SYMBOLS[label.strip()]
    text = normalized(label)
    return SPELLINGS.get(text) or (SPELLINGS.get(text[:-1]) if text.endswith("s") else None)


def term(label: str) -> Term:
    """The term a label spells; KeyError (saying so) for a measurement word the glossary does not define."""
    found = find(label)
    if found is None:
        raise KeyError(f"{label!r} is not defined in specviz/glossary.py: define it there, or use the word "
                       "it defines for the same idea")
    return found


def undefined(labels) -> list[str]:
    """The labels, columns or fields among `labels` that name neither a term of the glossary nor one of the
    words that are not measurements (`NOT_MEASUREMENTS`)."""
    return [label for label in labels if find(label) is None and normalized(label) not in NOT_MEASUREMENTS]


def title(label: str) -> str:
    """The hover text for a label: the term's definition."""
    t = term(label)
    return f"{t.name}{f' ({t.symbol})' if t.symbol else ''}: {t.definition}"


def term_html(label: str, shown: str | None = None) -> str:
    """`shown` (default: the label) with the term's definition on hover; KeyError for an undefined term."""
    return f'<span class="sv-term" title="{html.escape(title(label), quote=True)}">{html.escape(shown or label)}</span>'


def first_sentence(text: str) -> str:
    return re.split(r"(?<=[.)])\s+(?=[A-Z])", text, maxsplit=1)[0]


def legend(labels, markdown: bool = True, short: bool = False) -> str:
    """One line defining the given terms, for under a table (`short`: each definition's first sentence)."""
    words = [term(label) for label in labels]
    bold = "**" if markdown else ""
    return "; ".join(f"{bold}{t.name}{bold}: {(first_sentence(t.definition) if short else t.definition).rstrip('.')}"
                     for t in words) + "."


def hover_map() -> dict[str, str]:
    """Every spelling -> its hover text, for the page's script to title Gradio's own labels with."""
    return {spelling: title(t.name) for spelling, t in SPELLINGS.items()}


def markdown() -> str:
    """docs/glossary.md."""
    lines = ["# Glossary", "",
             "<!-- Written by `python -m specviz.glossary > docs/glossary.md` from specviz/glossary.py; "
             "tests/test_glossary.py checks it is current. Edit the package, not this page. -->", "",
             "One word per idea: the page, `bench`, the HTTP API and these docs use these words, and the page "
             "shows each definition when you hover its label. Two that are easy to mix up: **accepted length** "
             "counts the target's own token (it is 1 for autoregressive decoding), **acceptance rate** is per "
             "speculated token (a share between 0 and 1).", "",
             "| term | symbol | JSON field | definition |", "|---|---|---|---|"]
    for t in TERMS:
        field = f"`{t.field}`" if t.field else ""
        if t.aliases:
            field += " (older: " + ", ".join(f"`{a}`" for a in t.aliases) + ")"
        lines.append(f"| {t.name} | {t.symbol} | {field} | {t.definition}{_elsewhere(t)} |")
    lines += ["", "## The words a learner meets", "",
              "The ideas behind the numbers, for a reader new to speculative decoding.", "",
              "| word | what it is |", "|---|---|"]
    lines += [f"| {t.name} | {t.definition}{_elsewhere(t)} |" for t in CONCEPTS]
    lines += ["", "Older JSON names, kept so saved runs and scripts still read: `new_tokens` (`bench --json`, the "
              "CLI's trace summary) is **tokens**; `speedup_vs_ar` and `same_as_ar` (`bench --json`) are **speedup** "
              "and **identical to ar**. New fields use the glossary's words; these may be renamed in a release "
              "that says so.", ""]
    return "\n".join(lines)


def _elsewhere(t: Term) -> str:
    return f" *Elsewhere called:* {'; '.join(t.elsewhere)}." if t.elsewhere else ""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--json"]:
        print(json.dumps({t.name: t.definition for t in TERMS}, indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

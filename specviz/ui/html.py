"""HTML pieces from traces: coloured token text, legend, live stats, pool entry, run summary.

Pure functions returning strings with inline styles (they look right wherever the
HTML lands: the app, a notebook, a saved page).
"""

from __future__ import annotations

import html

from ..glossary import term_html
from ..methods import baseline
from ..trace import (ORIGIN_COPY, SOURCE_AR, SOURCE_BONUS, SOURCE_COPY, SOURCE_DRAFT, SOURCE_NGRAM, LookaheadPayload,
                     RunTrace)
from .figures import METHOD_COLORS, METHOD_LABELS, plural


def esc(text, quote: bool = True) -> str:
    """Any value as text safe inside HTML or SVG, in an element or a quoted attribute: every view writes a trace's
    strings (and numbers, which an upload could make strings) through it, so they are data, never markup (issue
    66). `quote=False` leaves quotes as they are, for text that never lands in an attribute (plotly's)."""
    return html.escape(str(text), quote=quote)


# Token background by how the token was produced.
SOURCE_STYLE = {
    SOURCE_DRAFT: ("#bfdbfe", "accepted from the draft tree"),
    SOURCE_BONUS: ("#fde68a", "bonus / corrected token (target's own)"),
    SOURCE_NGRAM: ("#bbf7d0", "accepted from a Lookahead n-gram"),
    SOURCE_COPY: ("#fbcfe8", "copied from the prompt or the text so far (prompt lookup)"),
    SOURCE_AR: ("#eef0f3", "plain autoregressive"),
}
NEAR_TIE_NOTE = (
    "In bf16/fp16 a forward over many tokens at once can round differently from a one-token forward, "
    "which can flip a near-tie between the two most likely tokens; from there the texts go separate ways, "
    "so the speeds below compare different texts. In fp32 the outputs are identical token for token "
    "(choose fp32 under Method settings → Precision to check).")
# Why a run ended, in words (traces store the short codes).
FINISH_WORDS = {"eos": "end of text", "length": "token limit", "cancelled": "stopped", "error": "error"}
SAMPLING_NOTE = (
    "Sampling: outputs differ by design (each method draws its own random numbers), but every method "
    "samples exactly from the target model's distribution — the speedup costs no quality.")


def legend_html() -> str:
    items = "".join(
        f'<span style="display:inline-flex;align-items:center;margin-right:18px">'
        f'<span style="background:{color};border-radius:4px;width:22px;height:16px;display:inline-block;'
        f'margin-right:6px;border:1px solid #cbd5e1"></span>{esc(label)}</span>'
        for color, label in SOURCE_STYLE.values())
    # Token texts mark what would otherwise be invisible: a step that wrote only a space must not look empty.
    marks = ('<span style="color:#4b5563"><b>⏎</b> marks a new line; in the pictures and captions <b>·</b> '
             'marks a space</span>')
    return f'<div class="sv-legend" style="font-size:15px;line-height:1.9">{items}{marks}</div>'


def _token_span(text: str, source: str, latest: bool) -> str:
    color = SOURCE_STYLE.get(source, SOURCE_STYLE[SOURCE_AR])[0]
    shown = esc(text).replace("\n", "⏎<br>")
    # A token that wraps keeps its outline closed on every line it spans.
    outline = ("box-shadow:0 0 0 2px #111827;-webkit-box-decoration-break:clone;box-decoration-break:clone;"
               if latest else "")
    return (f'<span class="sv-tok sv-{esc(source)}" style="background:{color};border-radius:3px;'
            f'padding:1px 0;{outline}">{shown}</span>')


def tokens_html(run: RunTrace | None, upto: int | None = None) -> str:
    """The generated text coloured by source; the latest step's tokens outlined."""
    if run is None:
        return _panel('<span style="color:#9ca3af">not run</span>')
    steps = run.steps[:upto]
    body = "".join(_token_span(text, source, i == len(steps) - 1) for i, rec in enumerate(steps)
                   for text, source in zip(rec.new_token_texts, rec.token_sources))
    error = (f'<div class="sv-error" style="background:#fee2e2;color:#991b1b;border:1px solid #fca5a5;'
             f'border-radius:6px;padding:8px;margin-bottom:8px;white-space:normal">'
             f'<b>error:</b> {esc(run.error)}</div>' if run.error else "")
    return _panel(error + (body or '<span style="color:#9ca3af">waiting…</span>'))


def _panel(inner: str) -> str:
    return (f'<div class="sv-text" style="font-family:ui-monospace,SFMono-Regular,Menlo,monospace;'
            f'font-size:16px;line-height:1.7;white-space:pre-wrap;word-break:break-word;min-height:220px;'
            f'max-height:440px;overflow-y:auto;padding:10px;border:1px solid #e5e7eb;border-radius:8px;'
            f'background:#fff">{inner}</div>')


def run_stats(run: RunTrace | None, upto: int | None = None) -> dict:
    steps = [] if run is None else run.steps[:upto]
    tokens = sum(len(s.new_token_ids) for s in steps)
    seconds = sum(s.total_ms for s in steps) / 1000
    speculated = sum(1 for s in steps for src in s.token_sources if src in (SOURCE_DRAFT, SOURCE_NGRAM, SOURCE_COPY))
    # Accepted length leaves out the first step, the prompt's forward, which writes one token whatever the method.
    after_prompt = steps[1:]
    return {
        "tokens": tokens,
        "steps": len(steps),
        "seconds": seconds,
        "tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
        "tokens_per_forward": tokens / len(steps) if steps else 0.0,
        "accepted_length": (sum(len(s.new_token_ids) for s in after_prompt) / len(after_prompt) if after_prompt
                            else float(tokens)),
        "speculated_share": speculated / tokens if tokens else 0.0,
    }


def run_settings(run: RunTrace | None) -> dict:
    """The settings `run` recorded; {} without a run, or where an uploaded trace's are not a mapping."""
    return run.settings if run is not None and isinstance(run.settings, dict) else {}


def finish_words(reason: str | None) -> str:
    return FINISH_WORDS.get(reason, reason or "")


def sampling_words(sampling: dict) -> str:
    """A run's sampling settings as a reader says them: 'greedy', or 'temperature 0.6, top-p 0.9, seed 0'."""
    try:
        temperature = float(sampling.get("temperature", 0.0) or 0.0)
        if temperature <= 0:
            return "greedy"
        parts = [f"temperature {temperature:g}"]
        if float(sampling.get("top_p", 1.0) or 1.0) < 1.0:
            parts.append(f"top-p {float(sampling['top_p']):g}")
        if float(sampling.get("top_k", 0) or 0) > 0:
            parts.append(f"top-k {sampling['top_k']}")
    except (TypeError, ValueError, AttributeError):   # an uploaded trace's odd values: show them as they are
        return f"sampling {sampling}"
    parts.append(f"seed {sampling.get('seed', 0)}")
    return ", ".join(parts)


UNRACED = '<div class="sv-unraced"></div>'   # a method the race does not run: its column is hidden (static/page.css)


def stats_html(method: str, run: RunTrace | None, upto: int | None = None, running: bool = False,
               waiting: bool = False, raced: bool = True) -> str:
    """The column header: method name, live tokens/s, tokens per forward, steps, tokens, time (each label with its
    glossary definition on hover). `waiting`: before any race, this method's 'auto' size is still being measured on
    this machine. `raced` False: the race does not run it, and the page hides its column."""
    if not raced:
        return UNRACED
    color = METHOD_COLORS.get(method, "#111827")
    label = METHOD_LABELS.get(method, method)
    if run is None:
        state = "waiting for measurements" if waiting else "ready"
    elif run.error:
        state = "error"
    elif running and (upto is None or upto == len(run.steps)) and not run.finish_reason:
        state = "running…"
    elif upto is not None and upto < len(run.steps):
        state = f"at step {upto} of {len(run.steps)}"   # stepping back: how it ended comes later
    else:
        state = finish_words(run.finish_reason) or ("…" if running else "")
    st = run_stats(run, upto)
    # The time's unit in small type: "0.41 s" at 22 px wrapped onto two lines in a 1280 px page's columns.
    cells = [("tokens/s", f"{st['tokens_per_second']:.1f}"),
             ("tokens per forward", f"{st['tokens_per_forward']:.2f}"),
             ("steps", str(st["steps"])), ("tokens", str(st["tokens"])),
             ("time", f'{st["seconds"]:.2f}<span style="font-size:14px;font-weight:400"> s</span>')]
    # Sized by the column's width (cqi: the header is an inline-size container), at most 22 px: four columns on a
    # 1280 px projector overflowed their column by 30-40 px at a fixed 22 px.
    stat_cells = "".join(
        f'<div style="text-align:center;padding:0 clamp(2px, 1.5cqi, 6px)"><div class="sv-stat-value" '
        f'style="font-size:clamp(15px, 6.4cqi, 22px);font-weight:700;white-space:nowrap">{v}</div>'
        f'<div class="sv-stat-label" style="font-size:12px;color:#6b7280">{term_html(k)}</div></div>'
        for k, v in cells)
    ran = what_ran(run_settings(run))
    # What ran, between the name and the state on the header's one line (cut short, whole on hover): a line of its
    # own would push the presenter view's tree below a 1280 x 720 screen.
    ran_span = (f'<span class="sv-ran" style="flex:1;min-width:0;margin:0 8px;font-size:13px;color:#374151;'
                f'white-space:nowrap;overflow:hidden;text-overflow:ellipsis" title="{esc(ran)}">{esc(ran)}</span>'
                if ran else "")
    return (f'<div class="sv-stats" style="border-top:6px solid {color};padding:6px 4px;container-type:inline-size">'
            f'<div style="display:flex;justify-content:space-between;align-items:baseline">'
            f'<span class="sv-method-name" style="font-size:22px;font-weight:700;color:{color};white-space:nowrap">'
            f'{esc(label)}</span>{ran_span}'
            # Cut short rather than drawn over the name where four columns share a projector's 1280 px.
            f'<span style="font-size:14px;color:#6b7280;white-space:nowrap;min-width:0;overflow:hidden;'
            f'text-overflow:ellipsis;margin-left:6px" title="{esc(state)}">{esc(state)}</span></div>'
            f'<div style="display:flex;justify-content:space-between;margin-top:4px">{stat_cells}</div></div>')


def what_ran(settings: dict) -> str:
    """The column's one line on what ran, from the settings its run recorded: a tree method's draft and tree
    (the EAGLE-style draft with the adaptive tree, or the independent draft with the DP tree), a window
    method's sizes; "" for a method that records neither."""
    if settings.get("tree"):
        draft = "EAGLE-style feature draft" if settings.get("draft_kind") == "feature" else "independent draft"
        if settings["tree"] == "adaptive":
            tree = f"adaptive tree, up to {settings.get('max_nodes') or settings.get('tree_budget')} nodes"
        elif settings.get("tree_budget"):
            tree = f"DP tree, {settings['tree_budget']} nodes, depth {settings.get('tree_depth')}"
        else:
            tree = "the tree given"
        return f"{draft} · {tree}"
    if settings.get("window"):
        return f"W {settings['window']}, N {settings.get('ngram')}, G {settings.get('guesses')}"
    return ""


def most_used_ngrams(run: RunTrace | None, upto: int | None = None, top: int = 5) -> list[tuple[str, int, int]]:
    """The pool's n-grams that paid off most so far: (text, times accepted, tokens they gave), best first."""
    used: dict[str, list[int]] = {}
    for rec in ([] if run is None else run.steps[:upto]):
        p = rec.payload
        if not isinstance(p, LookaheadPayload) or p.accepted_candidate is None:
            continue
        cand = p.candidates[p.accepted_candidate]
        if cand.match_length <= 0:
            continue
        text = "".join(cand.texts)
        entry = used.setdefault(text, [0, 0])
        entry[0] += 1
        entry[1] += cand.match_length
    ranked = sorted(used.items(), key=lambda kv: (-kv[1][1], -kv[1][0], kv[0]))
    return [(text, n, tokens) for text, (n, tokens) in ranked[:top]]


def _most_used_html(used: list[tuple[str, int, int]] | None) -> str:
    if used is None:
        return ""
    if not used:
        return ('<div style="font-size:14px;color:#6b7280;margin-top:6px">Most used n-grams: none has matched '
                'yet.</div>')
    items = "".join(f'<li><code style="background:#fef3c7;padding:0 4px;border-radius:4px;white-space:pre">'
                    f'{esc(text.replace(chr(10), "⏎"))}</code> — accepted {n}×, {plural(tokens, "token")}</li>'
                    for text, n, tokens in used)
    return (f'<div style="font-size:14px;margin-top:6px"><b>Most used n-grams so far</b> (tokens they gave)'
            f'<ol style="margin:2px 0 0 20px;padding:0">{items}</ol></div>')


def pool_entry_html(payload: LookaheadPayload | None, key_text: str | None = None,
                    used: list[tuple[str, int, int]] | None = None) -> str:
    """The candidates verified this step for the current key, matched prefix highlighted, and the
    pool's most used n-grams so far (`most_used_ngrams`)."""
    if payload is None:
        return '<div style="color:#9ca3af;padding:8px">the n-gram pool entry appears here when Lookahead runs</div>'
    key = key_text if key_text is not None else str(payload.key_token_id)
    head = (f'<div style="font-size:16px;margin-bottom:6px"><b>Pool entry for key</b> '
            f'<code style="background:#fef3c7;padding:2px 6px;border-radius:4px">{esc(key)}</code> '
            f'— pool holds {esc(payload.pool_size)} n-grams'
            f'{" (warm-up: no candidates yet)" if payload.warmup else ""}</div>')
    if not payload.candidates:
        return head + '<div style="color:#6b7280">no candidates for this key this step</div>' + _most_used_html(used)
    rows = []
    for i, cand in enumerate(payload.candidates):
        chosen = payload.accepted_candidate == i
        cells = []
        for k, text in enumerate(cand.texts or [str(t) for t in cand.tokens]):
            matched = k < cand.match_length
            style = ("background:#bbf7d0;border:1px solid #16a34a" if matched
                     else "background:#f3f4f6;border:1px solid #e5e7eb;color:#6b7280")
            cells.append(f'<span style="{style};border-radius:4px;padding:1px 6px;margin-right:3px;'
                         f'font-family:ui-monospace,monospace">{esc(text.replace(chr(10), "⏎")) or "∅"}</span>')
        mark = "✔ accepted" if chosen else ""
        origin = ('<span title="copied from the prompt or the text so far (prompt lookup)" style="background:'
                  f'{SOURCE_STYLE[SOURCE_COPY][0]};border-radius:4px;padding:0 5px">copied</span>'
                  if cand.origin == ORIGIN_COPY else '<span style="color:#6b7280">pool</span>')
        rows.append(f'<tr style="{"background:#ecfdf5;font-weight:600" if chosen else ""}">'
                    f'<td style="padding:3px 8px;color:#6b7280">{i}</td><td style="padding:3px 8px">{origin}</td>'
                    f'<td style="padding:3px 8px">{"".join(cells)}</td>'
                    f'<td style="padding:3px 8px;text-align:center">{esc(cand.match_length)}</td>'
                    f'<td style="padding:3px 8px;color:#16a34a">{mark}</td></tr>')
    table = ('<table style="border-collapse:collapse;font-size:15px"><tr style="color:#6b7280">'
             '<th>#</th><th>from</th><th style="text-align:left">candidate n-gram</th><th>match</th><th></th></tr>'
             + "".join(rows) + "</table>")
    return head + '<div style="overflow-x:auto">' + table + "</div>" + _most_used_html(used)


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token over the common length, None when one is a prefix of the other."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def losslessness(race, method: str) -> dict:
    """How `method`'s text compares with autoregressive: identical / differs (where) / sampling / n/a."""
    run, ar = race.runs.get(method), race.runs.get(baseline())
    if run is None or not run.steps:
        return {"status": "n/a", "message": "no output"}
    if not race.greedy:
        return {"status": "sampling", "message": SAMPLING_NOTE}
    if ar is None or not ar.steps:
        return {"status": "n/a", "message": "run Autoregressive as well to check the text is identical"}
    a, b = ar.token_ids, run.token_ids
    idx = first_difference(a, b)
    if idx is None:
        common = min(len(a), len(b))
        note = "" if len(a) == len(b) else f" (compared on the first {common} tokens: one run stopped early)"
        return {"status": "identical", "message": f"identical to autoregressive, {common} tokens{note}"}
    ta, tb = ([t for s in r.steps for t in s.new_token_texts] for r in (ar, run))
    low_precision = race.dtype in ("bf16", "fp16", "q4", "int8")
    return {"status": "differs", "index": idx, "ar_token": ta[idx] if idx < len(ta) else "",
            "token": tb[idx] if idx < len(tb) else "",
            "message": (f"differs from autoregressive at token {idx}: AR chose {ta[idx]!r}, "
                        f"{METHOD_LABELS.get(method, method)} chose {tb[idx]!r}."),
            "explanation": NEAR_TIE_NOTE if low_precision else
            "This should not happen in fp32 greedy decoding: please report it with the downloaded trace."}


# The summary table's columns; those that are measurements carry their glossary definition on hover.
SUMMARY_COLUMNS = ("method", "speedup", "tokens/s", "tokens per forward", "accepted length", "speculated share",
                   "tokens", "finish")
SUMMARY_TERMS = SUMMARY_COLUMNS[1:-1]


def summary_html(race, upto: dict[str, int] | None = None) -> str:
    """After a run: speedup, tokens per forward, accepted length, speculated share, and the losslessness
    verdict."""
    if race is None:
        return ""
    stats = {m: run_stats(r, (upto or {}).get(m)) for m, r in race.runs.items()}
    ar_rate = stats.get(baseline(), {}).get("tokens_per_second", 0.0)
    rows = []
    for m in race.methods:
        st, run = stats[m], race.runs[m]
        speedup = f"{st['tokens_per_second'] / ar_rate:.2f}×" if ar_rate and m != baseline() and st["tokens"] else (
            "1.00×" if m == baseline() and st["tokens"] else "—")
        accepted = f"{st['accepted_length']:.2f}" if st["steps"] > 1 else "—"
        share = "—" if m == baseline() else f"{st['speculated_share']:.0%}"
        shown = (upto or {}).get(m)
        # Stepping back through a race: how a run ended is not known yet at that step.
        finish = "…" if shown is not None and shown < len(run.steps) else finish_words(run.finish_reason)
        cells = (f'{st["tokens_per_second"]:.1f}', f'{st["tokens_per_forward"]:.2f}', accepted, share, st["tokens"],
                 esc(finish))
        rows.append(
            f'<tr><td style="padding:4px 10px;font-weight:700;color:{METHOD_COLORS.get(m)}">'
            f'{esc(METHOD_LABELS.get(m, m))}</td>'
            f'<td style="padding:4px 10px;font-size:20px;font-weight:700">{speedup}</td>'
            + "".join(f'<td style="padding:4px 10px">{cell}</td>' for cell in cells) + "</tr>")
    head = "".join(f'<th style="padding:4px 10px">{term_html(c) if c in SUMMARY_TERMS else esc(c)}</th>'
                   for c in SUMMARY_COLUMNS)
    table = ('<table style="border-collapse:collapse;font-size:16px;margin-top:6px"><tr style="color:#6b7280;'
             f'text-align:left">{head}</tr>' + "".join(rows) + "</table>")
    found = [(METHOD_LABELS.get(m, m), losslessness(race, m)) for m in race.methods if m != baseline()]
    sampled = [label for label, v in found if v["status"] == "sampling"]
    if len(sampled) > 1:   # one note for every sampled method, not the same paragraph twice
        found = [(" and ".join(sampled), {"status": "sampling", "message": SAMPLING_NOTE})] + [
            (label, v) for label, v in found if v["status"] != "sampling"]
    verdicts = []
    for label, v in found:
        color, icon = {"identical": ("#dcfce7", "✓"), "differs": ("#fee2e2", "⚠"),
                       "sampling": ("#e0f2fe", "ℹ")}.get(v["status"], ("#f3f4f6", "•"))
        extra = f'<div style="font-size:14px;margin-top:4px">{esc(v["explanation"])}</div>' if "explanation" in v else ""
        verdicts.append(f'<div class="sv-verdict sv-{v["status"]}" style="background:{color};border-radius:8px;'
                        f'padding:10px 14px;margin:6px 0;font-size:18px"><b>{icon} {esc(label)}:'
                        f'</b> {esc(v["message"])}{extra}</div>')
    meta = (f'<div style="color:#6b7280;font-size:13px;margin-top:6px">{esc(race.target_name)} · draft '
            f'{esc(race.draft_name)} · {esc(race.device)} {esc(race.dtype)}'
            f'{f" ({esc(race.precision_choice)})" if race.precision_choice else ""}'
            f'{f" ({esc(race.machine)})" if race.machine else ""} · {esc(race_graphs_words(race))} · '
            f'{esc(sampling_words(race.sampling))}'
            f'{" · stopped early" if race.cancelled else ""}{esc(first_sizes_words(race))}</div>')
    return f'<div class="sv-summary">{"".join(verdicts)}{table}{meta}</div>'


def first_sizes_words(race) -> str:
    """' · first sizes: ...' where a method raced on first sizes because this machine was still being
    measured for its 'auto' size (`runtime.race.FIRST_SIZES_NOTE`), else ''."""
    reasons = [run_settings(run).get("sizing_reason", "") for run in race.runs.values()
               if run_settings(run).get("sizing") == "first"]
    return f" · first sizes: {'; '.join(str(r).split(': ', 1)[0] for r in reasons)} (measuring this machine was not " \
           f"finished; the next race uses the measured sizes)" if reasons else ""


def race_graphs_words(race) -> str:
    """The summary line's graphs: "graphs: replayed (N shapes, capture X ms)", "graphs: static, eager (capture failed)"
    or "graphs: off" (with ZeroGPU's reason when its policy decided)."""
    from ..runtime.race import graphs_words

    runs = [run for run in race.runs.values() if run is not None]
    # Only a hosting policy's decision is worth the line's room (the default reasons restate the setting).
    reasons = [run_settings(run).get("graphs_reason") or "" for run in runs]
    return graphs_words([run.graphs for run in runs], next((r for r in reasons if "ZeroGPU" in r), None))


def table_html(rows: list[dict], title: str, highlight: dict | None = None, limit: int = 12,
               labels: dict | None = None) -> str:
    """A small table of dict rows (the predicted-speedup tables of the auto choices); `labels` names the
    columns for a reader."""
    if not rows:
        return f'<div style="color:#6b7280">{esc(title)}: nothing measured yet</div>'
    cols = list(rows[0].keys())
    body = []
    for row in rows[:limit]:
        hit = highlight is not None and all(row.get(k) == v for k, v in highlight.items())
        cells = "".join(f'<td style="padding:2px 10px">{_fmt(row.get(c))}</td>' for c in cols)
        body.append(f'<tr style="{"background:#dcfce7;font-weight:700" if hit else ""}">{cells}</tr>')
    head = "".join(f'<th style="padding:2px 10px;text-align:left">{esc(str((labels or {}).get(c, c)))}</th>'
                   for c in cols)
    return (f'<div style="font-size:16px;font-weight:700;margin:8px 0 4px">{esc(title)}</div>'
            f'<table style="border-collapse:collapse;font-size:14px"><tr style="color:#6b7280">{head}</tr>'
            f'{"".join(body)}</table>')


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return esc(str(value))


def measuring_html(progress: dict | None) -> str:
    """The bar the page shows while the decoding worker measures this machine for 'auto' sizes: what it
    measures, how far, and the time its rate leaves (`engine.measuring.Progress.to_dict()`); '' when idle."""
    if not progress:
        return ""
    total = max(1, int(progress.get("total") or 1))
    share = min(1.0, max(0.0, float(progress.get("done") or 0) / total))
    left = progress.get("left_s")
    part = int(progress.get("part") or 0)
    in_part = " in this part" if part else ""
    when = f"about {max(1, round(float(left)))} s left{in_part}" if left is not None else "estimating the time left"
    if progress.get("paused"):
        when = "paused while a race runs (no measurement runs beside a timed race)"
    what = f"part {part}: {progress.get('what', '')}" if part else str(progress.get("what", ""))
    return (f'<div class="sv-measuring" role="status" style="margin:4px 0;font-size:14px;color:#374151">'
            f'<div>Measuring this machine for the <i>auto</i> sizes (once per machine, kept in its cache) — '
            f'{esc(what)} — <b>{share:.0%}</b>, {esc(when)}. A race started now begins at once with first '
            f'sizes.</div><progress max="100" value="{100 * share:.0f}" style="width:100%;height:10px">'
            f'{share:.0%}</progress></div>')

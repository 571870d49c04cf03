"""The methods SpecViz races, one `Method` record each, kept in the method's own folder (`<folder>/method.py`).

Every list the package keeps of methods reads these records: the decoders the engine builds and what it
resolves before building them (`engine.methods`), the request's choices and the page's names (`request`), the
trace's runs (`trace`), the page's labels and colours (`ui.figures`), hosting's cost figures (`hosting`). A
method is its folder plus one line in `REGISTERED`.

Import-light on purpose (no torch): the records name their decoder and sizing by module path, imported on
first use, so one method's import cost (or breakage) never touches the others.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

# The methods' records, in the order the page shows their columns. One line per method.
REGISTERED = (
    "specviz.autoregressive.method",
    "specviz.sequoia.method",
    "specviz.lookahead.method",
    "specviz.prompt_lookup.method",
)


@dataclass(frozen=True)
class Method:
    id: str                   # the engine's name: CLI specs, the API, trace keys
    label: str                # what the page calls it
    colour: str               # its colour in every figure
    decoder: str              # "module:class" of its `engine.decoder.Decoder`
    # "module:function" resolving a decoder's options before it is built (a Sequoia tree's size is measured, and
    # raced, by building other decoders: never inside the decoder); None: the options go as they are.
    resolve: str | None = None
    # The module of its sizes on the command line (import-light: argparse): `add_args(parser)`, `from_args(args)`
    # (decoder options), `parse_sizes(text, spec)` (a spec's `@...`, or None), `RANGED`, `SPEC_SYNTAX`.
    args: str | None = None
    drafts: bool = False      # speculates with a draft model, so the command's draft matters to it
    # The module of its hardware-aware sizing, for what the app asks before and between races:
    # `auto_pending(pair, sampling, graphs, **options)` (would `auto` measure first?), `measure_auto(...)`,
    # `first_sizes(...)`, and for `auto`'s notes `auto_size_words`, `AUTO_WHAT`, `why_small`; None for a method
    # that measures nothing.
    sizing: str | None = None
    # Hosting's estimates of a race's GPU time before anything is measured (`hosting`): a step's cost in target
    # forwards and the tokens it makes (conservative: fewer tokens a step, so a race rarely meets its own clock),
    # and the shapes it captures as CUDA graphs.
    step_forwards: float = 1.0
    tokens_per_step: float = 1.0
    graph_shapes: int = 1
    # Whether a race that names no methods runs it (the page's first race, the API's default): the three the
    # page is about; another method is raced when asked for, and its column shows only then.
    raced_by_default: bool = True
    # The one method the others are measured against (speedups, losslessness, `bench`'s same-as column, what a
    # sizing prices a token at): exactly one record says so.
    baseline: bool = False
    # The module of what the page says and draws of its runs, from a trace alone (pure, import-light: no torch):
    # `narrate(trace, run, step, texts)` (the step-through caption, HTML), and where it predicts its own tokens per
    # step from a run's measured rates, `tokens_per_step(run)`; None: the page's generic words.
    views: str | None = None
    # The module of its column in the what-if panel (`ui.whatif`), for a method `auto` sizes: `PLAN` (the plan
    # cache it reads: prefix, and "pair" or "target"), `SLIDERS` (its sliders: name -> least, most, default,
    # label), `plan_curve(plan)`, `inputs(trace, plan, from_run, profile)`, `point(inp, ...)`,
    # `column(inp, done, sizes)` and optionally `NOTE`; None: no column.
    whatif: str | None = None


@functools.cache
def registered() -> dict[str, Method]:
    """id -> record, in `REGISTERED` order (imported once: the records are constants)."""
    records = [importlib.import_module(path).METHOD for path in REGISTERED]
    return {m.id: m for m in records}


@functools.cache
def baseline() -> str:
    """The id of the baseline method (`Method.baseline`)."""
    (only,) = [m.id for m in registered().values() if m.baseline]
    return only


def method_ids() -> tuple[str, ...]:
    return tuple(registered())


def labels() -> dict[str, str]:
    return {m.id: m.label for m in registered().values()}


def colours() -> dict[str, str]:
    return {m.id: m.colour for m in registered().values()}


def _module(method: str, part: str):
    """The module a method's record names as `part` ("views", "whatif", "args"), or None where it names none
    (or the method is not registered)."""
    path = getattr(registered().get(method), part, None)
    return importlib.import_module(path) if path else None


def method_views(method: str):
    """The method's views module (`Method.views`), or None."""
    return _module(method, "views")


def whatifs() -> dict:
    """method id -> its what-if module, for each method that has one (`Method.whatif`), in the page's order."""
    return {m: module for m in registered() if (module := _module(m, "whatif")) is not None}


def args_module(method: str):
    """The method's command-line module (`Method.args`), or None for a method without sizes."""
    return _module(method, "args")


def sizing_module(method: str):
    """The method's hardware-aware sizing module (`Method.sizing`), or None for a method that measures nothing."""
    return _module(method, "sizing")


def raced_by_default() -> tuple[str, ...]:
    return tuple(m.id for m in registered().values() if m.raced_by_default)


def drafting() -> tuple[str, ...]:
    return tuple(m.id for m in registered().values() if m.drafts)


def size_numbers(sizes: str) -> list[int]:
    """A spec's `@AxBxC` sizes as whole numbers ([] where they are not), for the methods' `parse_sizes`."""
    try:
        return [int(x) for x in sizes.split("x")]
    except ValueError:
        return []


def sized() -> tuple[str, ...]:
    """The methods whose sizes `auto` measures for this hardware."""
    return tuple(m.id for m in registered().values() if m.sizing)

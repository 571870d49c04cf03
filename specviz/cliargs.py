"""Command-line pieces every command shares: model, sampling and method-size arguments.

Public and import-free of the commands themselves, so `specviz.cli` and each
method's own `cli.py` import this module and never each other.
"""

from __future__ import annotations

import argparse
import contextlib

from .errors import InvalidInput
from .methods import args_module, method_ids
from .methodspec import MethodSpec, command_needs_draft, parse_specs


def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--model", default="default",
                   help="target: a Hugging Face id, a local directory, or 'default' (offline SmolLM2-135M-Instruct)")
    g.add_argument("--draft", default=None,
                   help="draft for Sequoia (same tokenizer), for every method spec that names none of its own "
                        "(sequoia+feature / +independent / +self do); default: the shipped draft for the offline "
                        "default, otherwise the target itself ('self')")
    g.add_argument("--dtype", default="auto", help="auto | fp32 | bf16 | fp16 | q4 (the offline default's 4-bit GGUF weights, CPU) | int8 "
                   "(weight-only int8 linears of a Llama-family model, CPU)")
    g.add_argument("--device", default="auto", help="auto | cpu | cuda")
    g.add_argument("--quiet", action="store_true",
                   help="no progress on stderr while this machine's forward costs are measured for 'auto' sizes")


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=None)


def add_graphs_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--graphs", default="auto", metavar="{auto,on,off}",
                   help="CUDA graphs: auto (on for a CUDA device), on, off; whether each method's one step is "
                        "captured and replayed (never on a CPU); 'auto' sizes are measured for it")


def graphs_from_args(args: argparse.Namespace) -> str:
    """The --graphs value, checked (a clear `InvalidInput` naming the choices)."""
    from .engine.graphs import check_graphs

    return check_graphs(getattr(args, "graphs", "auto"))


def add_method_args(p: argparse.ArgumentParser) -> None:
    """--graphs, and each method's own size flags (`Method.args`)."""
    add_graphs_arg(p)
    for module in filter(None, map(args_module, method_ids())):
        module.add_args(p)


def check_ranges(args: argparse.Namespace, *names: str) -> None:
    """The settings the command line shares with the app's race take the same ranges (specviz.request)."""
    from .request import RANGES

    for name in names:
        if getattr(args, name, None) is not None:
            RANGES[name].check(getattr(args, name))


def method_options(args: argparse.Namespace, method: str) -> dict:
    """The decoder keyword arguments a method takes, from the command line (its `Method.args` module)."""
    module = args_module(method)
    if module is None:
        return {}
    check_ranges(args, *module.RANGED)
    return module.from_args(args)


def sampling_from_args(args: argparse.Namespace):
    from .engine.sampling import SamplingConfig

    check_ranges(args, "temperature", "top_p", "seed")
    return SamplingConfig(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                          seed=args.seed).validated()


def spec_options(args: argparse.Namespace, spec: MethodSpec) -> dict:
    """A one-method command's decoder options: the size flags, or the spec's sizes (not both)."""
    options = method_options(args, spec.method)
    if not spec.sizes:
        return options
    flagged = [k for k, v in options.items() if v is not None and k != "pool_from_prompt"]
    if flagged:
        raise InvalidInput(f"'{spec.text}' gives its sizes already; drop the size options ({', '.join(flagged)})")
    return {**options, **spec.sizes}


def command_draft(args: argparse.Namespace, specs: list[MethodSpec]) -> str | None:
    """The draft a command loads with its target: `--draft` when a spec drafts without naming its own
    draft; the one draft the specs name when they all name the same; else none (the target alone)."""
    if command_needs_draft(specs):
        return args.draft
    named = {s.draft for s in specs if s.drafts}
    return named.pop() if len(named) == 1 else "self"


def load_pair_for(args: argparse.Namespace, methods: list[str]):
    """The model pair a command needs: the draft only where a method drafts (else the target alone).

    Sizes play no part: `sequoia` and `sequoia@3x3` load (and run) the same draft."""
    from .engine.models import load_pair

    draft = command_draft(args, parse_specs(methods))
    return load_pair(args.model, draft, device=args.device, dtype=auto_precision_measured(args))


def auto_precision_measured(args: argparse.Namespace) -> str:
    """`--dtype`, having measured this CPU's precisions first where `auto` still needs them (once per
    machine and thread count, `engine.precision`; the progress shows like any measurement's)."""
    if args.dtype in (None, "", "auto"):
        from .engine.models import choose_device, ensure_precisions_measured

        ensure_precisions_measured(args.model, choose_device(args.device))
    return args.dtype


class CliMeasuring:
    """Progress of a measurement on stderr: one tqdm bar per phase (what it measures, its steps, the time
    left), then one line saying where the results were cached. Nothing when `quiet`."""

    def __init__(self, quiet: bool = False, stream=None):
        import sys

        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.bar = None
        self.part = 0
        self.saved: list[str] = []

    def report(self, progress) -> None:
        from tqdm import tqdm

        if progress.cached_in:
            self.saved.append(progress.cached_in)
            return
        if self.bar is None or progress.part != self.part:
            self.close_bar()
            self.part = progress.part
            self.bar = tqdm(total=progress.total, desc=f"specviz: measuring {progress.what}", file=self.stream,
                            unit="step", leave=True, dynamic_ncols=True)
        self.bar.update(progress.done - self.bar.n)

    def close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def finish(self) -> None:
        self.close_bar()
        if self.saved and not self.quiet:
            from pathlib import Path

            import torch

            folder = Path(self.saved[0]).parent
            count = len(dict.fromkeys(self.saved))
            threads = torch.get_num_threads()
            print(f"specviz: measured this machine for 'auto' at {threads} thread{'s' * (threads != 1)}; "
                  f"{count} result{'s' * (count != 1)} cached in {folder} (the next run reads them)",
                  file=self.stream)


@contextlib.contextmanager
def cli_measuring(args: argparse.Namespace):
    """The measurement reporter a command runs under (`engine.measuring`): bars on stderr unless --quiet."""
    from .engine.measuring import Measuring, measuring

    quiet = bool(getattr(args, "quiet", False))
    shown = CliMeasuring(quiet)
    with measuring(None if quiet else Measuring(report=shown.report, interval_s=0.2)):
        try:
            yield shown
        finally:
            shown.finish()

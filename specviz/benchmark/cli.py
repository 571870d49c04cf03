"""`python -m specviz bench`: its arguments and the command (the work is in `runner`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from ..cliargs import (
    add_method_args,
    add_model_args,
    add_sampling_args,
    graphs_from_args,
    load_pair_for,
    method_options,
    sampling_from_args,
)
from ..engine.prompts import limit_per_suite, read_prompts, read_suites
from ..errors import InvalidInput
from ..methods import args_module, method_ids
from ..methodspec import LLAMA_METHODS, parse_spec
from . import runner
from .report import columns_line


def cmd_bench(args: argparse.Namespace) -> int:
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise InvalidInput("--methods is empty")
    if len(set(methods)) < len(methods):
        raise InvalidInput(f"--methods names a method twice: {args.methods}")
    runner.check_methods(methods)  # unknown / unimplemented methods fail before loading models
    if args.sweep:
        methods += runner.sweep_methods(methods)
        runner.check_methods(methods)
    if not args.prompts and not args.suite:
        raise InvalidInput("give --suite (chat,code,math,rewrite) and/or --prompts FILE.jsonl")
    prompts = read_suites(args.suite) if args.suite else []
    for path in args.prompts or []:
        prompts.extend(read_prompts(path))
    if args.per_suite:
        prompts = limit_per_suite(prompts, args.per_suite)
    if args.limit:
        prompts = prompts[:args.limit]
    if args.max_new_tokens <= 0:
        raise InvalidInput(f"max new tokens must be at least 1, got {args.max_new_tokens}")
    if args.repeats < 1:
        raise InvalidInput(f"--repeats must be at least 1, got {args.repeats}")
    if args.threads is not None:
        if args.threads < 1:
            raise InvalidInput(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    sampling = sampling_from_args(args)
    graphs = graphs_from_args(args)
    options = {m: method_options(args, m) for m in method_ids()
               if args_module(m) is not None and any(parse_spec(x).method == m for x in methods)}
    pair = load_pair_for(args, methods)
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    if pair.precision_choice:   # `--dtype auto`: which precision runs, and why
        say(f"precision: {pair.precision_choice}")
    hf_options = runner.tuned_options(pair, sampling)
    if args.tune and any(parse_spec(m).method in ("hf-assisted", "hf-prompt-lookup") for m in methods):
        tune_prompts = limit_per_suite(prompts, 1)
        hf_options = runner.tune_hf(pair, tune_prompts, sampling, args.max_new_tokens, methods, progress=say)
    overrides = {"hf-assisted": {"assistant_tokens": args.assistant_tokens,
                                 "assistant_confidence": args.assistant_confidence},
                 "hf-prompt-lookup": {"prompt_lookup_tokens": args.prompt_lookup_tokens}}
    for method, knobs in overrides.items():
        given = {k: v for k, v in knobs.items() if v is not None}
        options[method] = {**hf_options.get(method, {}), **given}
    # llama.cpp decodes on the threads our methods use (torch's count, which --threads sets).
    for method in LLAMA_METHODS:
        options[method] = {"threads": torch.get_num_threads(), "lookup_tokens": args.llama_lookup_tokens}
    records = runner.run_bench(pair, prompts, methods, sampling, args.max_new_tokens, options, progress=say,
                               warmup_tokens=args.warmup_tokens, repeats=args.repeats, graphs=graphs)
    rows = runner.summarise(records, methods)
    print(runner.format_table(rows))
    print(columns_line(markdown=False, short=True) + " All terms: docs/glossary.md.")
    agreement = runner.format_agreement(records, methods)
    if agreement:
        print(agreement)
    out = runner.run_info(pair, methods, sampling, args.max_new_tokens, options, argv=sys.argv, repeats=args.repeats,
                          graphs=graphs)
    out.update(summary=rows, records=[r.to_dict() for r in records])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
        say(f"wrote {args.json}")
    if args.report:
        from .report import write_report

        for path in write_report(out, args.report):
            say(f"wrote {path}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="every prompt through every method, in one process")
    p.add_argument("--suite", default=None, help="prompt suites by name: chat,code,math,rewrite")
    p.add_argument("--prompts", nargs="+", default=None,
                   help="JSONL files of {\"prompt\", \"id\"?, \"suite\"?} (with or instead of --suite)")
    p.add_argument("--methods", default="ar,hf-generate",
                   help="method specs, comma-separated: ar, sequoia, lookahead, and transformers' hf-generate, "
                        "hf-static (static cache; compiled on CUDA only), hf-assisted, hf-prompt-lookup; fixed "
                        "sizes as sequoia@BUDGETxDEPTH, sequoia@adaptive[=T], lookahead@WxNxG (sizes never "
                        "change the draft); a draft other than --draft's as sequoia+feature / +independent / "
                        "+self (e.g. sequoia+independent@32x6); on a CPU llama.cpp's llama-cpp and "
                        "llama-cpp-lookup on the offline default's GGUF. Every record names the draft it ran")
    p.add_argument("--limit", type=int, default=0, help="only the first N prompts")
    p.add_argument("--per-suite", type=int, default=0, help="only the first N prompts of each suite")
    p.add_argument("--json", default=None, help="write every record and the summary here")
    p.add_argument("--report", default=None, help="write a Markdown table and plotly figures into this folder")
    p.add_argument("--sweep", action="store_true",
                   help="also run Sequoia and Lookahead at fixed sizes (tokens/s against size figure)")
    p.add_argument("--tune", action="store_true",
                   help="first grid-search hf-assisted's and hf-prompt-lookup's knobs (one prompt per "
                        "suite), cache the winners for this model pair and use them")
    p.add_argument("--warmup-tokens", type=int, default=None, help="tokens per warm-up run (default 32)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads for every method, ours, transformers' and llama.cpp's (default: torch's count)")
    p.add_argument("--repeats", type=int, default=1,
                   help="time every (prompt, method) N times, methods interleaved round after round, and keep "
                        "the run of median speed (steadier figures on a shared machine; N times as long)")
    g = p.add_argument_group("transformers' peers (default: the cached --tune result, else 5 / 0.0 / 10)")
    g.add_argument("--assistant-tokens", type=int, default=None, help="hf-assisted: num_assistant_tokens")
    g.add_argument("--assistant-confidence", type=float, default=None,
                   help="hf-assisted: assistant_confidence_threshold")
    g.add_argument("--prompt-lookup-tokens", type=int, default=None, help="hf-prompt-lookup: prompt_lookup_num_tokens")
    g = p.add_argument_group("llama.cpp's peers (llama-cpp, llama-cpp-lookup; `bash scripts/setup.sh llama`)")
    g.add_argument("--llama-lookup-tokens", type=int, default=None,
                   help="llama-cpp-lookup: LlamaPromptLookupDecoding's num_pred_tokens (default 10, its own)")
    add_model_args(p)
    add_sampling_args(p)
    add_method_args(p)
    p.set_defaults(func=cmd_bench)

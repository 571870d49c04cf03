"""Command line: `python -m specviz <command>`.

User mistakes (SpecVizError) print one line, `error: ...`, and exit with status
2; only genuine bugs produce a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import InvalidInput, SpecVizError


def _add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--model", default="default",
                   help="target: a Hugging Face id, a local directory, or 'default' (offline SmolLM2-135M-Instruct)")
    g.add_argument("--draft", default=None,
                   help="draft for Sequoia (same tokenizer); default: the shipped draft for the offline "
                        "default, otherwise the target itself ('self')")
    g.add_argument("--dtype", default="auto", help="auto | fp32 | bf16 | fp16")
    g.add_argument("--device", default="auto", help="auto | cpu | cuda")


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=None)


def _add_method_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sequoia")
    g.add_argument("--tree", choices=["auto"], default=None,
                   help="choose the tree from measured acceptance and forward times (the default)")
    g.add_argument("--tree-budget", type=int, default=None, help="tree nodes including the root (N)")
    g.add_argument("--tree-depth", type=int, default=None, help="speculated levels (D)")
    g = p.add_argument_group("lookahead")
    g.add_argument("--lookahead", choices=["auto"], default=None,
                   help="choose W, N, G from the measured forward cost (the default)")
    g.add_argument("--window", type=int, default=None, help="W: Jacobi window width")
    g.add_argument("--ngram", type=int, default=None, help="N: n-gram size")
    g.add_argument("--guesses", type=int, default=None, help="G: candidates verified per step")
    g.add_argument("--pool-from-prompt", action=argparse.BooleanOptionalAction, default=True,
                   help="seed the n-gram pool with the prompt's n-grams")


def method_options(args: argparse.Namespace, method: str) -> dict:
    """The decoder keyword arguments a method takes, from the command line."""
    if method == "sequoia":
        if args.tree == "auto" and (args.tree_budget is not None or args.tree_depth is not None):
            raise InvalidInput("--tree auto cannot be combined with --tree-budget/--tree-depth")
        if (args.tree_budget is None) != (args.tree_depth is None):
            raise InvalidInput("give both --tree-budget and --tree-depth, or neither (auto)")
        return {"tree_budget": args.tree_budget, "tree_depth": args.tree_depth}
    if method == "lookahead":
        sizes = (args.window, args.ngram, args.guesses)
        if args.lookahead == "auto" and any(v is not None for v in sizes):
            raise InvalidInput("--lookahead auto cannot be combined with --window/--ngram/--guesses")
        if any(v is None for v in sizes) and any(v is not None for v in sizes):
            raise InvalidInput("give all of --window, --ngram and --guesses, or none (auto)")
        return {"window": args.window, "ngram": args.ngram, "guesses": args.guesses,
                "pool_from_prompt": args.pool_from_prompt}
    return {}


def _sampling(args: argparse.Namespace):
    from .sampling import SamplingConfig

    return SamplingConfig(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                          seed=args.seed).validated()


def _needs_draft(methods: list[str]) -> bool:
    return any(m in ("sequoia", "hf-assisted") for m in methods)


def _load(args: argparse.Namespace, methods: list[str]):
    from .models import load_pair

    draft = args.draft if _needs_draft(methods) else "self"
    return load_pair(args.model, draft, device=args.device, dtype=args.dtype)


# -- commands ----------------------------------------------------------------------------


def cmd_generate(args: argparse.Namespace) -> int:
    from .decoders import decoder_class, make_decoder
    from .text import validate_prompt

    validate_prompt(args.prompt)
    decoder_class(args.method)  # unknown / unimplemented methods fail before loading models
    sampling = _sampling(args)
    options = method_options(args, args.method)
    pair = _load(args, [args.method])
    decoder = make_decoder(args.method, pair, args.prompt, sampling=sampling,
                           max_new_tokens=args.max_new_tokens, **options)
    if args.json:
        trace = decoder.run()
        print(trace.to_json())
    else:
        trace = decoder.run(on_step=lambda r: print("".join(r.new_token_texts), end="", flush=True))
        s = trace.summary()
        print(f"\n\n[{s['method']}] {s['new_tokens']} tokens, {s['target_forwards']} target forwards, "
              f"{s['tokens_per_second']:.1f} tokens/s ({s['finish_reason']})", file=sys.stderr)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from . import bench

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise InvalidInput("--methods is empty")
    bench.check_methods(methods)  # unknown / unimplemented methods fail before loading models
    if args.sweep:
        methods += bench.sweep_methods(methods)
        bench.check_methods(methods)
    if not args.prompts and not args.suite:
        raise InvalidInput("give --suite (chat,code,math,rewrite) and/or --prompts FILE.jsonl")
    prompts = bench.read_suites(args.suite) if args.suite else []
    for path in args.prompts or []:
        prompts.extend(bench.read_prompts(path))
    if args.per_suite:
        prompts = bench.limit_per_suite(prompts, args.per_suite)
    if args.limit:
        prompts = prompts[:args.limit]
    if args.max_new_tokens <= 0:
        raise InvalidInput(f"max new tokens must be at least 1, got {args.max_new_tokens}")
    sampling = _sampling(args)
    options = {m: method_options(args, m) for m in ("sequoia", "lookahead")
               if any(bench.parse_method(x)[0] == m for x in methods)}
    pair = _load(args, methods)
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    hf_options = bench.tuned_options(pair, sampling)
    if args.tune and any(m in ("hf-assisted", "hf-prompt-lookup") for m in methods):
        tune_prompts = bench.limit_per_suite(prompts, 1)
        hf_options = bench.tune_hf(pair, tune_prompts, sampling, args.max_new_tokens, methods, progress=say)
    overrides = {"hf-assisted": {"assistant_tokens": args.assistant_tokens,
                                 "assistant_confidence": args.assistant_confidence},
                 "hf-prompt-lookup": {"prompt_lookup_tokens": args.prompt_lookup_tokens}}
    for method, knobs in overrides.items():
        given = {k: v for k, v in knobs.items() if v is not None}
        options[method] = {**hf_options.get(method, {}), **given}
    records = bench.run_bench(pair, prompts, methods, sampling, args.max_new_tokens, options, progress=say,
                              warmup_tokens=args.warmup_tokens)
    rows = bench.summarise(records, methods)
    print(bench.format_table(rows))
    out = bench.run_info(pair, methods, sampling, args.max_new_tokens, options, argv=sys.argv)
    out.update(summary=rows, records=[r.to_dict() for r in records])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
        say(f"wrote {args.json}")
    if args.report:
        from .report import write_report

        for path in write_report(out, args.report):
            say(f"wrote {path}")
    return 0


def cmd_fetch_model(args: argparse.Namespace) -> int:
    from .models import offline_default_dir

    print(offline_default_dir())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specviz",
                                     description="See, measure and teach speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("generate", help="run one prompt through one method")
    p.add_argument("--method", default="ar", help="ar | sequoia | lookahead")
    p.add_argument("--prompt", required=True)
    p.add_argument("--json", action="store_true", help="print the whole run as one JSON object")
    _add_model_args(p)
    _add_sampling_args(p)
    _add_method_args(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("bench", help="every prompt through every method, in one process")
    p.add_argument("--suite", default=None, help="prompt suites by name: chat,code,math,rewrite")
    p.add_argument("--prompts", nargs="+", default=None,
                   help="JSONL files of {\"prompt\", \"id\"?, \"suite\"?} (with or instead of --suite)")
    p.add_argument("--methods", default="ar,hf-generate",
                   help="ar, sequoia, lookahead, hf-generate, hf-assisted, hf-prompt-lookup; fixed sizes "
                        "as sequoia@BUDGETxDEPTH, lookahead@WxNxG")
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
    g = p.add_argument_group("transformers' peers (default: the cached --tune result, else 5 / 0.0 / 10)")
    g.add_argument("--assistant-tokens", type=int, default=None, help="hf-assisted: num_assistant_tokens")
    g.add_argument("--assistant-confidence", type=float, default=None,
                   help="hf-assisted: assistant_confidence_threshold")
    g.add_argument("--prompt-lookup-tokens", type=int, default=None, help="hf-prompt-lookup: prompt_lookup_num_tokens")
    _add_model_args(p)
    _add_sampling_args(p)
    _add_method_args(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("fetch-model", help="download and convert the offline default model now")
    p.set_defaults(func=cmd_fetch_model)
    from . import distill

    distill.register(sub)
    from . import sequoia_cli

    sequoia_cli.register(sub)
    from . import lookahead_auto

    lookahead_auto.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SpecVizError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130

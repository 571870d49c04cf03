"""Command line: `python -m specviz <command>`.

This module holds the commands that belong to no single method (`generate`,
`fetch-model`) and gathers the others from their rooms: each method's folder,
the draft and the benchmark register their own subcommands. User mistakes
(SpecVizError) print one line, `error: ...`, and exit with status 2; only
genuine bugs produce a traceback.
"""

from __future__ import annotations

import argparse
import sys

from .cliargs import (
    add_method_args,
    add_model_args,
    add_sampling_args,
    load_pair_for,
    method_options,
    sampling_from_args,
)
from .errors import SpecVizError


def cmd_generate(args: argparse.Namespace) -> int:
    from .engine.methods import decoder_class, make_decoder
    from .engine.text import validate_prompt

    validate_prompt(args.prompt)
    decoder_class(args.method)  # unknown / unimplemented methods fail before loading models
    sampling = sampling_from_args(args)
    options = method_options(args, args.method)
    pair = load_pair_for(args, [args.method])
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


def cmd_fetch_model(args: argparse.Namespace) -> int:
    from .engine.models import offline_default_dir

    print(offline_default_dir())
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .benchmark import cli as benchmark_cli
    from .draft import cli as draft_cli
    from .lookahead import cli as lookahead_cli
    from .sequoia import cli as sequoia_cli

    parser = argparse.ArgumentParser(prog="python -m specviz",
                                     description="See, measure and teach speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("generate", help="run one prompt through one method")
    p.add_argument("--method", default="ar", help="ar | sequoia | lookahead")
    p.add_argument("--prompt", required=True)
    p.add_argument("--json", action="store_true", help="print the whole run as one JSON object")
    add_model_args(p)
    add_sampling_args(p)
    add_method_args(p)
    p.set_defaults(func=cmd_generate)

    benchmark_cli.register(sub)
    p = sub.add_parser("fetch-model", help="download and convert the offline default model now")
    p.set_defaults(func=cmd_fetch_model)
    for room in (draft_cli, sequoia_cli, lookahead_cli):
        room.register(sub)
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

"""Command line: `python -m specviz <command>`.

This module holds the commands that belong to no single method (`generate`,
`fetch-model`, `app`) and gathers the others from their rooms: each method's folder,
the draft and the benchmark register their own subcommands. User mistakes
(SpecVizError) print one line, `error: ...`, and exit with status 2; only
genuine bugs produce a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from .cliargs import (
    add_method_args,
    add_model_args,
    add_sampling_args,
    cli_measuring,
    graphs_from_args,
    load_pair_for,
    sampling_from_args,
    spec_options,
)
from .errors import InvalidInput, SpecVizError
from .methods import baseline
from .methodspec import parse_spec, spec_help


def cmd_generate(args: argparse.Namespace) -> int:
    from .engine.methods import decoder_class, make_decoder
    from .runtime.race import graphs_words
    from .engine.text import validate_prompt

    validate_prompt(args.prompt)
    spec = parse_spec(args.method)
    decoder_class(spec.method)  # unknown / unimplemented methods fail before loading models
    spec.check_one_draft(args.draft)
    sampling = sampling_from_args(args)
    graphs = graphs_from_args(args)
    options = spec_options(args, spec)
    pair = load_pair_for(args, [spec.text])
    decoder = make_decoder(spec.method, pair, args.prompt, sampling=sampling,
                           max_new_tokens=args.max_new_tokens, graphs=graphs, **options)
    if args.json:
        trace = decoder.run()
        print(trace.to_json())
    else:
        trace = decoder.run(on_step=lambda r: print("".join(r.new_token_texts), end="", flush=True))
        s = trace.summary()
        drafted = f", draft: {pair.draft_name}" if spec.drafts else ""
        print(f"\n\n[{spec.text}] {s['new_tokens']} tokens, {s['target_forwards']} target forwards, "
              f"{s['tokens_per_second']:.1f} tokens/s ({s['finish_reason']}{drafted}; "
              f"{graphs_words([trace.graphs])})", file=sys.stderr)
    return 0


def cmd_fetch_model(args: argparse.Namespace) -> int:
    from .engine.models import offline_default_dir

    print(offline_default_dir())
    return 0


def cmd_floors(args: argparse.Namespace) -> int:
    """t(n) of the target as the decoders run it, beside this machine's two floors (`engine.floors`)."""
    import json

    import torch

    from .engine import floors
    from .engine.profiler import curve_key, forward_curve

    if args.threads:
        torch.set_num_threads(args.threads)
    pair = load_pair_for(args, [baseline()])
    if pair.device.type != "cpu":
        raise InvalidInput("floors measures a CPU's read bandwidth and int8 peak; this pair runs on "
                           f"{pair.device.type}")
    work = floors.forward_work(pair.target)
    rates = floors.measured_rates(floors.read_mib(work), refresh=args.refresh)
    curve = forward_curve(pair.target, curve_key(pair, "target"), sizes=list(floors.FLOOR_SIZES),
                          context_len=args.context, refresh=args.refresh)
    record = floors.floors_record(curve, work, rates, args.context)
    print(json.dumps(record, indent=1) if args.json else floors.table_markdown(record))
    return 0


def cmd_app(args: argparse.Namespace) -> int:
    """Serve the app from the package alone (app.py is not in the wheel): `specviz.serve` puts it
    together for `app.py` and for this command alike."""
    from .serve import choose_hosted, serve

    asked = True if args.hosted else (False if args.local_limits else None)
    hosted = choose_hosted(args.host, args.share, asked)
    why = ("" if not hosted else " (hosted limits" + ("" if asked else ": this server is public; "
                                                      "--local-limits turns them off") + ")")
    print(f"SpecViz on http://{args.host}:{args.port}{why}", file=sys.stderr, flush=True)
    serve(host=args.host, port=args.port, share=args.share, hosted=hosted)
    return 0


def add_app_parser(sub) -> None:
    p = sub.add_parser("app", help="serve the SpecViz app (the race in a browser)",
                       description="Serve the SpecViz app, the same one its Hugging Face Space runs; "
                                   "open the printed address in a browser.")
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                   help="interface to listen on (0.0.0.0: every interface); default 127.0.0.1")
    p.add_argument("--port", type=int, default=os.environ.get("GRADIO_SERVER_PORT", "7860"),
                   help="default 7860")
    p.add_argument("--share", action="store_true", help="also open a temporary public gradio.live link")
    p.add_argument("--hosted", action="store_true",
                   help="apply the public server's limits (as SPECVIZ_HOSTED=1 does): shorter races, "
                        "only the configured models, places in the queue per client. On by itself with --share "
                        "or a --host other than loopback")
    p.add_argument("--local-limits", action="store_true",
                   help="keep the local limits on a public server (--share, --host 0.0.0.0), as "
                        "SPECVIZ_HOSTED=0 does: any model, long races, no per-client places")
    p.set_defaults(func=cmd_app)


def build_parser() -> argparse.ArgumentParser:
    from .benchmark import cli as benchmark_cli
    from .draft import cli as draft_cli
    from .lookahead import cli as lookahead_cli
    from .sequoia import cli as sequoia_cli

    parser = argparse.ArgumentParser(prog="python -m specviz",
                                     description="See, measure and teach speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("generate", help="run one prompt through one method")
    p.add_argument("--method", default=baseline(), help=spec_help())
    p.add_argument("--prompt", required=True)
    p.add_argument("--json", action="store_true", help="print the whole run as one JSON object")
    add_model_args(p)
    add_sampling_args(p)
    add_method_args(p)
    p.set_defaults(func=cmd_generate)

    benchmark_cli.register(sub)
    p = sub.add_parser("floors", help="the target's t(n) beside this CPU's bandwidth and int8 floors",
                       description="Measure this CPU's read bandwidth and int8 peak (cached), and print the "
                                   "target's forward time t(n) at 1, 2, 4, 8 and 16 rows beside the two floors "
                                   "no forward can beat: bytes read over the bandwidth, MACs over the peak.")
    p.add_argument("--context", type=int, default=200, help="context tokens before the n new ones (default 200)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    p.add_argument("--refresh", action="store_true", help="measure again, ignoring the cache")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    add_model_args(p)
    p.set_defaults(func=cmd_floors)
    p = sub.add_parser("fetch-model", help="download and convert the offline default model now")
    p.set_defaults(func=cmd_fetch_model)
    add_app_parser(sub)
    for room in (draft_cli, sequoia_cli, lookahead_cli):
        room.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with cli_measuring(args):   # progress on stderr whenever an 'auto' size measures this machine
            return args.func(args)
    except SpecVizError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130

"""The HTTP API's `/race`: one race from its settings by name, answered as one JSON object.

Every setting but the prompt has the page's default, so

    Client(url).predict("Write a haiku about trees", api_name="/race")

runs a race, and its result names each method's text, token ids, speed and verdict, and the race's trace (a
served file; gradio_client downloads it and gives its local path). docs/api.md documents the contract; keep the
names. The page's event and this endpoint list the settings once, from `RaceRequest` (`takes_race_settings`).
"""

import inspect
import typing

import gradio as gr
from gradio.data_classes import FileData

from ..runtime.race import release_freed_memory
from ..methods import baseline
from ..request import RaceRequest
from ..trace import RaceTrace
from . import html
from .racing import Visitors

TRACE_NAME = "specviz-trace.json"


def settings_signature(defaults: RaceRequest | None = None) -> inspect.Signature:
    """(the 19 settings, request: gr.Request): with `defaults`, every setting but the prompt has one."""
    hints = typing.get_type_hints(RaceRequest)
    params = []
    for name in RaceRequest.names():
        default = inspect.Parameter.empty if defaults is None or name == "prompt" else getattr(defaults, name)
        if isinstance(default, tuple):
            default = list(default)   # as JSON gives it back
        params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                                        annotation=hints[name]))
    params.append(inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                    annotation=gr.Request))
    return inspect.Signature(params)


def takes_race_settings(handler, defaults: RaceRequest | None = None, returns=inspect.Signature.empty,
                        stream: bool = False):
    """`handler(settings: dict, request)` as a function of the 19 settings (then Gradio's request), the
    signature Gradio reads to pass the page's inputs or an API call's arguments by name."""
    signature = settings_signature(defaults).replace(return_annotation=returns)

    def settings_of(args, kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        request = bound.arguments.pop("request")
        return bound.arguments, request

    if stream:
        def call(*args, **kwargs):
            yield from handler(*settings_of(args, kwargs))
    else:
        def call(*args, **kwargs):
            return handler(*settings_of(args, kwargs))
    call.__signature__ = signature
    call.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    if returns is not inspect.Signature.empty:
        call.__annotations__["return"] = returns
    call.__name__ = call.__qualname__ = handler.__name__
    call.__doc__ = handler.__doc__
    return call


def method_result(trace: RaceTrace, method: str, ar_rate: float) -> dict:
    """One method's line of the result: what it wrote, how fast, and whether it equals autoregressive."""
    run = trace.runs[method]
    stats = html.run_stats(run)
    if method == baseline():
        identical, verdict = (True, "autoregressive itself") if stats["tokens"] else (None, "no output")
    else:
        found = html.losslessness(trace, method)
        identical = {"identical": True, "differs": False}.get(found["status"])
        verdict = found["message"]
    return {
        "text": run.text,
        "token_ids": run.token_ids,
        "tokens": stats["tokens"],
        "tokens_per_second": round(stats["tokens_per_second"], 3),
        "tokens_per_forward": round(stats["tokens_per_forward"], 4),
        "accepted_length": round(stats["accepted_length"], 4),
        "speedup": round(stats["tokens_per_second"] / ar_rate, 3) if ar_rate and stats["tokens"] else None,
        "identical_to_ar": identical,   # None: not decided (sampled, or autoregressive did not run)
        "verdict": verdict,
        "target_forwards": run.target_forwards,
        "graphs": run.graphs,   # `engine.graphs.GraphStats.to_dict` (None: a trace from before graphs)
        # "first": an 'auto' size this machine had not measured yet, raced on first sizes; else None.
        "sizing": html.run_settings(run).get("sizing"),
        "finish_reason": run.finish_reason,
        "error": run.error,
    }


def race_result(trace: RaceTrace, trace_file: dict) -> dict:
    """The whole race as the API answers it."""
    ar = trace.runs.get(baseline())
    ar_rate = html.run_stats(ar)["tokens_per_second"] if ar is not None else 0.0
    return {
        "methods": {m: method_result(trace, m, ar_rate) for m in trace.methods},
        "trace": trace_file,
        "target": trace.target_name,
        "draft": trace.draft_name,
        "device": trace.device,
        "dtype": trace.dtype,
        "machine": trace.machine,
        "graphs": html.race_graphs_words(trace),
        "cancelled": trace.cancelled,
        "request": trace.request,
    }


class RaceApi:
    """`/race`: runs like the page's race (same queue, worker and Stop), returns `race_result`."""

    def __init__(self, handlers, served_by: gr.components.Component):
        self.handlers = handlers
        self.racer = handlers.racer
        self.served_by = served_by   # a component whose cache serves the trace file

    def endpoint(self, defaults: RaceRequest):
        return takes_race_settings(self.race, defaults, returns=dict)

    def race(self, settings: dict, request: gr.Request | None = None) -> dict:
        """Race the prompt with the given settings (the page's defaults for the others)."""
        from .handlers import session_of

        session = session_of(request)
        if not self.handlers.begin_race(session):
            raise gr.Error(Visitors.ONE_RACE, print_exception=False)
        control = self.handlers._register(session)   # /stop in the same client session ends it
        trace = None
        try:
            race_request = RaceRequest.from_values(**settings).validated(self.handlers.limits)
            for event in self.racer.events(race_request, control):
                if event[0] == "trace" and event[2]:
                    trace = event[1]
                elif self.handlers.client_gone(request) and not control.stop.is_set():
                    # Gradio does not stop a plain function whose client left: no one would read this race.
                    control.close()
        except Exception as exc:
            raise gr.Error(self.racer.failure(exc), print_exception=False) from None
        finally:
            release_freed_memory()
            self.handlers._unregister(session, control)
        if trace is None:
            raise gr.Error("the race ended without a result", print_exception=False)
        return race_result(trace, self.serve(trace))

    def serve(self, trace: RaceTrace) -> dict:
        """The trace written, copied where Gradio serves files, as the FileData a client downloads."""
        path = self.served_by.move_resource_to_block_cache(self.handlers.trace_files.write(trace))
        return FileData(path=path, orig_name=TRACE_NAME).model_dump()

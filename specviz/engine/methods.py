"""The decoders, by method name, and one factory that builds any of them.

The registry names each method's decoder by module path, so the engine (the race,
the CLI, the benchmark) reaches every method without importing any of them here.
"""

from __future__ import annotations

import importlib

from ..errors import InvalidInput
from .decoder import Decoder, validate_max_new_tokens
from .graphs import check_graphs
from .models import ModelPair
from .sampling import SamplingConfig
from .text import encode_prompt

# method name -> "module:class", imported on first use so one method's import
# cost (or breakage) never touches the others.
METHODS = {
    "ar": "specviz.autoregressive.decoder:AutoregressiveDecoder",
    "sequoia": "specviz.sequoia.decoder:SequoiaDecoder",
    "lookahead": "specviz.lookahead.decoder:LookaheadDecoder",
}
# method name -> "module:function" that resolves a decoder's options before it is built (a Sequoia
# tree's size is measured, and raced, by building other decoders: never inside the decoder).
METHOD_OPTIONS = {
    "sequoia": "specviz.sequoia.sizing:decoder_options",
}
# method name -> the module of its hardware-aware sizing, for what the app asks before and between races:
# `auto_pending(pair, sampling, graphs, **options)` (would `auto` measure first?), `measure_auto(...)`
# (measure and cache it now) and `first_sizes(...)` (options to race with at once meanwhile, and why).
METHOD_SIZING = {
    "sequoia": "specviz.sequoia.sizing",
    "lookahead": "specviz.lookahead.sizing",
}


def sizing(method: str, what: str):
    """A method's sizing function `what` (see `METHOD_SIZING`), or None for a method that measures nothing."""
    module = METHOD_SIZING.get(method)
    return getattr(importlib.import_module(module), what) if module else None


def _imported(path: str):
    module_name, _, name = path.partition(":")
    return getattr(importlib.import_module(module_name), name)


def decoder_class(method: str) -> type[Decoder]:
    if method not in METHODS:
        raise InvalidInput(f"unknown method '{method}' (choose from {', '.join(METHODS)})")
    module_name, _, class_name = METHODS[method].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise InvalidInput(f"method '{method}' is not implemented yet") from None
        raise
    return getattr(module, class_name)


def make_decoder(method: str, pair: ModelPair, prompt: str, *, sampling: SamplingConfig | None = None,
                 max_new_tokens: int = 128, prompt_ids: list[int] | None = None, graphs: str = "auto",
                 **options) -> Decoder:
    """Build a decoder for `prompt` (chat template applied when the model has one).

    `graphs` ('auto': on for CUDA, 'on', 'off') goes to the decoder and to its sizing, so an `auto`
    size is chosen from the forward costs the chosen path pays (graph replays, or eager launches)."""
    graphs = check_graphs(graphs)
    cls = decoder_class(method)
    ids = prompt_ids if prompt_ids is not None else encode_prompt(pair.tokenizer, prompt)
    sampling = sampling or SamplingConfig()
    if method in METHOD_OPTIONS:
        # The decoder's own checks first, as it makes them: a bad request fails before any sizing runs.
        sampling.validated()
        validate_max_new_tokens(max_new_tokens, len(ids), pair.max_context)
        options = _imported(METHOD_OPTIONS[method])(pair, sampling, graphs=graphs, **options)
    return cls(pair, prompt, ids, sampling, max_new_tokens, graphs=graphs, **options)

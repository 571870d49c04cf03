"""The decoders, by method name, and one factory that builds any of them.

Each method's record (`specviz.methods`, in the method's folder) names its decoder, its option resolver
and its sizing by module path, so the engine (the race, the CLI, the benchmark) reaches every method
without importing any of them here.
"""

from __future__ import annotations

import importlib

from ..errors import InvalidInput
from ..methods import registered, sizing_module
from .decoder import Decoder, validate_max_new_tokens
from .graphs import check_graphs
from .models import ModelPair
from .sampling import SamplingConfig
from .text import encode_prompt


def sizing(method: str, what: str):
    """A method's sizing function `what` (`Method.sizing`), or None for a method that measures nothing."""
    module = sizing_module(method)
    return getattr(module, what) if module is not None else None


def _imported(path: str):
    module_name, _, name = path.partition(":")
    return getattr(importlib.import_module(module_name), name)


def decoder_class(method: str) -> type[Decoder]:
    records = registered()
    if method not in records:
        raise InvalidInput(f"unknown method '{method}' (choose from {', '.join(records)})")
    module_name, _, class_name = records[method].decoder.partition(":")
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
    resolve = registered()[method].resolve
    if resolve:
        # The decoder's own checks first, as it makes them: a bad request fails before any sizing runs.
        sampling.validated()
        validate_max_new_tokens(max_new_tokens, len(ids), pair.max_context)
        options = _imported(resolve)(pair, sampling, graphs=graphs, **options)
    return cls(pair, prompt, ids, sampling, max_new_tokens, graphs=graphs, **options)

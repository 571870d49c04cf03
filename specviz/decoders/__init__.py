"""The decoders, by method name, and one factory that builds any of them."""

from __future__ import annotations

import importlib

from ..errors import InvalidInput
from ..models import ModelPair
from ..sampling import SamplingConfig
from ..text import encode_prompt
from .base import Decoder

# method name -> "module:class", imported on first use so one method's import
# cost (or breakage) never touches the others.
METHODS = {
    "ar": "specviz.decoders.autoregressive:AutoregressiveDecoder",
    "sequoia": "specviz.decoders.sequoia:SequoiaDecoder",
    "lookahead": "specviz.decoders.lookahead:LookaheadDecoder",
}
METHOD_LABELS = {"ar": "Autoregressive", "sequoia": "Sequoia", "lookahead": "Lookahead"}


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
                 max_new_tokens: int = 128, prompt_ids: list[int] | None = None, **options) -> Decoder:
    """Build a decoder for `prompt` (chat template applied when the model has one)."""
    cls = decoder_class(method)
    ids = prompt_ids if prompt_ids is not None else encode_prompt(pair.tokenizer, prompt)
    return cls(pair, prompt, ids, sampling or SamplingConfig(), max_new_tokens, **options)

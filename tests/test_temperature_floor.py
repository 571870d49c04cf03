"""A temperature below `MIN_TEMPERATURE` is greedy on every sampling path (issue #66, item 6).

logits / 1e-39 overflow to inf and the softmax to NaN: the eager sampler refused the row, the graphed one
(`draws.race_sample`, no host read) drew whatever NaN gave. Now the request, the config and every decoder
(eager and static steps, AR's draw and the speculative decoders' on-device draws) agree: it is greedy.
"""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_pair

from specviz.draws import first_argmax
from specviz.engine.methods import make_decoder
from specviz.engine.sampling import (MIN_TEMPERATURE, SamplingConfig, draw_token,
                                     next_token_on_device)
from specviz.request import RaceRequest

TINY = 1e-39
DECODERS = {"ar": {}, "sequoia": {"tree_parents": [-1, 0, 0, 1, 2]},
            "lookahead": {"window": 3, "ngram": 3, "guesses": 2, "pool_from_prompt": True}}


def test_a_tiny_temperature_is_greedy_in_the_request_and_the_config():
    assert RaceRequest(temperature=TINY).validated().temperature == 0.0
    assert RaceRequest(temperature=TINY).validated().sampling().greedy
    assert SamplingConfig(TINY).greedy and SamplingConfig(TINY).validated().temperature == 0.0
    assert not SamplingConfig(MIN_TEMPERATURE).greedy   # the floor itself samples


def test_each_sampler_draws_the_argmax_at_a_tiny_temperature():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 5
    argmax = first_argmax(logits)
    generator = torch.Generator().manual_seed(0)
    assert torch.equal(next_token_on_device(logits, SamplingConfig(TINY), generator), argmax)  # graphed
    token, check = draw_token(logits, SamplingConfig(TINY), generator)                          # AR's step
    assert torch.equal(token, argmax) and check is None


@pytest.mark.parametrize("graphs", ["off", "on"])   # on a CPU "on" runs the static (graph) step uncaptured
@pytest.mark.parametrize("method", list(DECODERS))
def test_every_decoder_at_a_tiny_temperature_writes_the_greedy_text(method, graphs, one_thread):
    pair = tiny_pair()

    def tokens(sampling):
        return make_decoder(method, pair, "", prompt_ids=[1, 2, 3, 1, 2], max_new_tokens=10, sampling=sampling,
                            graphs=graphs, **DECODERS[method]).run().token_ids

    # Unvalidated, as a decoder may be handed it: the config's own floor decides.
    assert tokens(SamplingConfig(TINY, seed=0)) == tokens(SamplingConfig())

"""Lookahead as one `specviz.methods.Method` record."""

from ..methods import Method

# Hosting's figures, measured on the H200 (79 tokens/s: 1.3 forwards a step, counted at one token); it captures
# one window layout per warm-up fill, N - 1 shapes (2: N = 3).
METHOD = Method(id="lookahead", label="Lookahead", colour="#d97706",
                decoder="specviz.lookahead.decoder:LookaheadDecoder", sizing="specviz.lookahead.sizing",
                args="specviz.lookahead.options",
                step_forwards=1.3, tokens_per_step=1.0, graph_shapes=2,
                views="specviz.lookahead.views", whatif="specviz.lookahead.whatif")

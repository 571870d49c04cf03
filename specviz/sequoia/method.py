"""Sequoia as one `specviz.methods.Method` record."""

from ..methods import Method

# Hosting's figures, measured on the H200: a 256-node step costs 35 ms for 4.3 tokens (2.5 forwards, 2 tokens:
# conservative); it captures the target's whole tree, the draft's root and each drafted level but the last,
# depth + 1 shapes in all (8: a tree 7 deep).
METHOD = Method(id="sequoia", label="Sequoia", colour="#2563eb",
                decoder="specviz.sequoia.decoder:SequoiaDecoder",
                resolve="specviz.sequoia.sizing:decoder_options", sizing="specviz.sequoia.sizing",
                args="specviz.sequoia.options", drafts=True,
                step_forwards=2.5, tokens_per_step=2.0, graph_shapes=8,
                views="specviz.sequoia.views", whatif="specviz.sequoia.whatif")

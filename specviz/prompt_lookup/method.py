"""Prompt lookup decoding as one `specviz.methods.Method` record: copies of the text's own past as the draft."""

from ..methods import Method

# Hosting's figures, before anything is measured: a step is about one forward (a few more rows) and, counted
# conservatively, one token; it captures one chain shape per copied length it meets (up to 11).
METHOD = Method(id="prompt-lookup", label="Prompt lookup", colour="#0d9488",
                decoder="specviz.prompt_lookup.decoder:PromptLookupDecoder",
                resolve="specviz.prompt_lookup.sizing:decoder_options", sizing="specviz.prompt_lookup.sizing",
                args="specviz.prompt_lookup.options",
                step_forwards=1.05, tokens_per_step=1.0, graph_shapes=11, raced_by_default=False,
                views="specviz.prompt_lookup.views")

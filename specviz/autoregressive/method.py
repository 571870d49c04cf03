"""Autoregressive decoding as one `specviz.methods.Method` record: the baseline, one token per target forward."""

from ..methods import Method

METHOD = Method(id="ar", label="Autoregressive", colour="#6b7280",
                decoder="specviz.autoregressive.decoder:AutoregressiveDecoder", baseline=True,
                views="specviz.autoregressive.views")

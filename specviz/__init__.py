"""SpecViz: see, measure and teach speculative decoding (autoregressive, Sequoia, Lookahead).

One folder per method (`autoregressive/`, `sequoia/`, `lookahead/`) holds its pure
algorithms, its decoder, its hardware-aware sizing and its commands; `engine/` is
what they share (model loading, the lean forward, sampling, profiling, the race);
`trace.py` the records everything else consumes; `ui/` the app; `draft/` the
offline default's draft and its training; `benchmark/` the `bench` command.
"""

__version__ = "0.1.0"

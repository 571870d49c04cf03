"""SpecViz: see, measure and teach speculative decoding (autoregressive, Sequoia, Lookahead)."""

__version__ = "0.1.0"

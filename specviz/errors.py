"""Errors that are the user's to fix.

Anything raised as a `SpecVizError` is shown as a one-line message (CLI) or a
visible notice (app), never as a traceback: the message must say what was
wrong and what to do instead.
"""


class SpecVizError(Exception):
    """A problem with the user's input or environment, with a readable message."""


class InvalidInput(SpecVizError, ValueError):
    """A setting or prompt outside what the decoders accept."""


class ModelLoadError(SpecVizError):
    """A model or tokenizer could not be loaded (missing, offline, mismatched)."""

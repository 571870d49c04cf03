"""The one escape every view writes a trace's or a request's strings through (issue 66).

A module of its own, importing nothing of SpecViz's, so that every view can use it, the figures that
html.py takes its colours from included, with no import cycle."""

import html


def esc(text, quote: bool = True) -> str:
    """Any value as text safe inside HTML or SVG, in an element or a quoted attribute: every view writes a trace's
    strings (and numbers, which an upload could make strings) through it, so they are data, never markup.
    `quote=False` leaves quotes as they are, for text that never lands in an attribute (plotly's)."""
    return html.escape(str(text), quote=quote)

"""Prompt lookup: guesses copied from the prompt and the text so far (no draft forward)."""

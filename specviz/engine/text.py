"""Prompt encoding and streaming detokenisation."""

from __future__ import annotations

from ..errors import InvalidInput

# Per-request cap on prompt length in characters, before tokenising; hosting can lower it.
DEFAULT_MAX_PROMPT_CHARS = 20_000


def validate_prompt(prompt, max_chars: int = DEFAULT_MAX_PROMPT_CHARS) -> str:
    if not isinstance(prompt, str):
        raise InvalidInput(f"the prompt must be text, got {type(prompt).__name__}")
    if not prompt.strip():
        raise InvalidInput("the prompt is empty: type something for the model to answer")
    if len(prompt) > max_chars:
        raise InvalidInput(f"the prompt is {len(prompt)} characters long; the limit is {max_chars}")
    return prompt


def encode_prompt(tokenizer, prompt: str, chat: bool | None = None) -> list[int]:
    """Token ids for `prompt`; chat models get their chat template with a generation prompt."""
    validate_prompt(prompt)
    use_chat = bool(getattr(tokenizer, "chat_template", None)) if chat is None else chat
    if use_chat:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer(prompt)["input_ids"]
    if not ids:
        raise InvalidInput("the prompt produced no tokens")
    return list(ids)


class Detokenizer:
    """Turns a growing list of token ids into text pieces, one per token.

    Decoding tokens one by one breaks multi-byte characters and drops the
    leading spaces some tokenizers encode in context, so each piece is the
    difference of two decodes over a short sliding window (as vLLM and TGI do).
    A token that ends mid-character yields "" and its text arrives with the next.
    """

    def __init__(self, tokenizer, context_ids: list[int] | None = None):
        self.tokenizer = tokenizer
        self.ids: list[int] = list(context_ids or [])[-4:]
        self.prefix_offset = 0
        self.read_offset = len(self.ids)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        prefix_text = self._decode(self.ids[self.prefix_offset:self.read_offset])
        new_text = self._decode(self.ids[self.prefix_offset:])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            piece = new_text[len(prefix_text):]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            return piece
        return ""

    def push_many(self, token_ids) -> list[str]:
        return [self.push(t) for t in token_ids]

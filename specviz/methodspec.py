"""One method spec, one draft: the parser every command reads a method from.

    spec    := METHOD ["+" DRAFT] ["@" SIZES]
    METHOD  := ar | sequoia | lookahead | hf-generate | hf-static | hf-assisted | hf-prompt-lookup
             | llama-cpp | llama-cpp-lookup                 (bench's peers)
    DRAFT   := feature | independent | self            (only for a method that drafts: sequoia, hf-assisted)
    SIZES   := BUDGET "x" DEPTH | adaptive ["=" THRESHOLD]   (sequoia: tree nodes x levels, or the adaptive tree)
             | W "x" N "x" G                                 (lookahead: window x n-gram x guesses)

Sizes never touch the draft: `sequoia`, `sequoia@3x3` and `sequoia@adaptive` all run the
draft the command names (`--draft`, else the target's default draft), and `sequoia+feature@3x3`
runs the feature draft whatever the command names. `bench`, `generate` and the app read
methods through `parse_spec`, so a spec resolves its draft the same way everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import InvalidInput
from .methods import args_module, drafting, method_ids

# transformers' own decoders, raced as peers in `bench` (see benchmark/runner.py).
HF_METHODS = ("hf-generate", "hf-static", "hf-assisted", "hf-prompt-lookup")
# llama.cpp's decoders on the offline default's GGUF, raced as peers in `bench` on a CPU (benchmark/peers.py,
# an optional extra).
LLAMA_METHODS = ("llama-cpp", "llama-cpp-lookup")
# The methods that speculate with a draft model, so the command's draft matters to them.
DRAFTING_METHODS = drafting() + ("hf-assisted",)
# The offline default's drafts by name; "self" is the target drafting for itself (any target).
DRAFT_NAMES = ("feature", "independent", "self")


def all_methods() -> tuple[str, ...]:
    return method_ids() + HF_METHODS + LLAMA_METHODS


@dataclass(frozen=True)
class MethodSpec:
    text: str            # as written, e.g. "sequoia+feature@3x3"; a bench record's method name
    method: str          # the method's id (its record's `Method.id`)
    draft: str | None    # "feature" / "independent" / "self", or None: the command's draft
    sizes: dict = field(default_factory=dict)   # decoder keyword arguments, e.g. {tree_budget: 3, tree_depth: 3}

    @property
    def drafts(self) -> bool:
        """Whether this method speculates with a draft model (and so runs a draft a record must name)."""
        return self.method in DRAFTING_METHODS

    def check_one_draft(self, command_draft: str | None) -> None:
        """A one-method command (`generate`) given two different drafts fails rather than pick one."""
        given = (command_draft or "").strip().lower()
        if self.draft is None or not given or given == self.draft or given in _ALIASES.get(self.draft, ()):
            return
        raise InvalidInput(f"'{self.text}' names the {self.draft} draft but --draft names '{command_draft}'; "
                           "give one of them")


# Names load_pair also accepts for the offline default's drafts.
_ALIASES = {"feature": ("eagle", "feature-draft"), "independent": ("distilled", "pruned")}


def parse_spec(text: str) -> MethodSpec:
    """`sequoia+feature@3x3` -> MethodSpec(text, method=sequoia, draft=feature, sizes={tree_budget: 3, tree_depth: 3})."""
    spec = text.strip()
    head, at, sizes = spec.partition("@")
    method, plus, draft = head.partition("+")
    if method not in all_methods():
        raise InvalidInput(f"unknown method '{method}' (choose from {', '.join(all_methods())})")
    if plus:
        if draft not in DRAFT_NAMES:
            raise InvalidInput(f"unknown draft '{draft}' in '{spec}' (choose from {', '.join(DRAFT_NAMES)})")
        if method not in DRAFTING_METHODS:
            raise InvalidInput(f"'{method}' runs no draft, so '{spec}' cannot name one "
                               f"(drafts belong to {', '.join(DRAFTING_METHODS)})")
        if method == "hf-assisted" and draft == "feature":
            raise InvalidInput("hf-assisted needs a draft transformers can run: use hf-assisted+independent "
                               "or hf-assisted+self")
    if at and not sizes:
        raise InvalidInput(f"'{spec}' ends in '@': give sizes ({', '.join(size_syntax())})")
    return MethodSpec(spec, method, draft or None, _parse_sizes(method, sizes, spec) if sizes else {})


def _parse_sizes(method: str, sizes: str, spec: str) -> dict:
    """A spec's `@...` as the method's decoder options (its `Method.args` module reads them)."""
    module = args_module(method)
    parsed = module.parse_sizes(sizes, spec) if module is not None else None
    if parsed is None:
        raise InvalidInput(f"cannot read sizes in '{spec}': use {' or '.join(size_syntax())}")
    return parsed


def size_syntax() -> list[str]:
    """Each sized method's spec syntax (`Method.args`' `SPEC_SYNTAX`)."""
    return [args_module(m).SPEC_SYNTAX for m in method_ids() if args_module(m) is not None]


def spec_help() -> str:
    """What `--method` takes, from the records: every method, its sizes, and the drafting ones' drafts."""
    drafts = "[+feature|+independent|+self]"
    forms = [m if args_module(m) is None else args_module(m).SPEC_SYNTAX.replace(m + "@", m + drafts * (
        m in DRAFTING_METHODS) + "@", 1) for m in method_ids()]
    return "a method spec: " + " | ".join(forms)


def parse_specs(text: str | list[str]) -> list[MethodSpec]:
    """A comma-separated list (or a list) of specs, each parsed; an empty list is an error."""
    items = text.split(",") if isinstance(text, str) else list(text)
    specs = [parse_spec(t) for t in items if t.strip()]
    if not specs:
        raise InvalidInput("no method given")
    return specs


def command_needs_draft(specs: list[MethodSpec]) -> bool:
    """Whether a command must load its draft: some spec drafts without naming a draft of its own."""
    return any(s.drafts and s.draft is None for s in specs)

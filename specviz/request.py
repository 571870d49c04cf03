"""One race request: the 19 settings a race runs from, their defaults and their ranges, checked once.

The page's controls, the HTTP API (`/race`) and the worker all speak `RaceRequest`;
the command line checks the settings it shares with it against the same `RANGES`.
`RaceRequest.validated` is the one place a race's input is checked: it returns a
normalised request (engine method ids, whole numbers, sizes only where a sizing
mode uses them) or raises `InvalidInput` with a message a visitor can act on. The
validated request travels to the worker as it is and is recorded in the trace
(`RaceTrace.request`), so a downloaded trace says what was asked for.

Import-light on purpose (no torch, no gradio): the engine, the worker and the UI import it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Literal, get_args

from .errors import InvalidInput
from .methods import args_module, labels, method_ids, raced_by_default

# -- what the settings may name -------------------------------------------------------------------

# The names the page shows for each method; the API takes either these or the engine's ids.
METHOD_NAMES = labels()
METHOD_IDS = {name: mid for mid, name in METHOD_NAMES.items()}
DEFAULT_METHODS = tuple(METHOD_NAMES[m] for m in raced_by_default())   # a race that names none runs these

DEFAULT_PRESET = "SmolLM2-135M-Instruct (offline default)"
# The same target with each shipped draft by name, so a workshop can race one against the other
# whichever the default takes: the EAGLE-style draft reads the target's hidden states (the tree's
# hover says what each node's draft saw); the independent one is a 4-layer model of its own.
FEATURE_PRESET = "SmolLM2-135M-Instruct (offline default) + feature draft"
INDEPENDENT_PRESET = "SmolLM2-135M-Instruct (offline default) + independent draft"
# label -> (target, draft); draft None = the package's default choice for that target.
PRESETS = {
    DEFAULT_PRESET: ("default", None),
    FEATURE_PRESET: ("default", "feature"),
    INDEPENDENT_PRESET: ("default", "independent"),
    "SmolLM2-1.7B-Instruct + SmolLM2-135M-Instruct": ("HuggingFaceTB/SmolLM2-1.7B-Instruct",
                                                     "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "Llama-2-7b-chat + JackFram/llama-68m": ("meta-llama/Llama-2-7b-chat-hf", "JackFram/llama-68m"),
    "Qwen2.5-1.5B-Instruct + Qwen2.5-0.5B-Instruct": ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
}
CUSTOM = "Custom model ids…"

# q4: the offline default's own 4-bit (Q4_1) weights on a CPU (SpecViz's kernel, else torch's int4);
# int8: a Llama-family model's linears in weight-only int8 on a CPU (`engine.quant`).
Dtype = Literal["auto", "fp32", "bf16", "fp16", "q4", "int8"]
# CUDA graphs (`engine.graphs.GRAPH_MODES`, spelled here so this module stays free of torch): 'auto' = on
# for a CUDA device (on ZeroGPU: when capture pays for the race, `hosting.zerogpu_graphs`), 'on', 'off'.
GraphsMode = Literal["auto", "on", "off"]
GRAPHS_MODES = get_args(GraphsMode)
# Sizing modes: 'auto' = fastest on this hardware, 'illustrative' = shapes that teach (several levels;
# their cost is shown), 'manual' = the numbers given; Sequoia's tree may also be 'adaptive' (grown each
# step from the draft's confidence, EAGLE-2's dynamic tree, within its own limits).
LookaheadMode = Literal["auto", "illustrative", "manual"]
TreeMode = Literal["auto", "illustrative", "manual", "adaptive"]
DTYPES, LOOKAHEAD_MODES, TREE_MODES = get_args(Dtype), get_args(LookaheadMode), get_args(TreeMode)

# The "illustrative" sizes: shapes that teach (several tree levels, several window levels) rather
# than the fastest on a CPU. The what-if panel shows their predicted cost.
ILLUSTRATIVE_TREE = {"tree_budget": 20, "tree_depth": 5}
ILLUSTRATIVE_LOOKAHEAD = {"window": 5, "ngram": 4, "guesses": 4}


# -- ranges ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Range:
    """The values one numeric setting may take, and the words an error uses for it."""

    label: str
    lo: float
    hi: float
    whole: bool = True

    def check(self, value, hi: float | None = None):
        """`value` as an int (or float), or `InvalidInput` naming the setting and its range."""
        hi = self.hi if hi is None else hi
        if isinstance(value, bool):
            raise InvalidInput(f"{self.label} must be a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            kind = "a whole number" if self.whole else "a number"
            raise InvalidInput(f"{self.label} must be {kind}, got {value!r}") from None
        if number != number:   # NaN compares false with every bound
            raise InvalidInput(f"{self.label} must be a number, got {value!r}")
        if self.whole and not number.is_integer():
            raise InvalidInput(f"{self.label} must be a whole number, got {value!r}")
        if not self.lo <= number <= hi:
            lo, hi, got = (str(int(n)) if self.whole and math.isfinite(n) else f"{n:g}" for n in (self.lo, hi, number))
            span = f"at least {lo}" if hi == "inf" else f"between {lo} and {hi}"
            raise InvalidInput(f"{self.label} must be {span}, got {got}")
        return int(number) if self.whole else number

    def check_whole(self, value) -> int:
        """`check` for a size given in code (a decoder's or a sizing's option), where only a number is a number:
        an int, or a float with no fraction; never a bool or a string (`check` also reads what a form sends)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidInput(f"{self.label} must be a whole number, got {value!r}")
        return int(self.check(value))


# One table for the page's controls, the HTTP API and the command line.
RANGES = {
    "max_new_tokens": Range("max new tokens", 1, 1024),   # a deployment may cap it lower (hosting)
    "temperature": Range("temperature", 0.0, 2.0, whole=False),
    "top_p": Range("top-p", 0.05, 1.0, whole=False),
    "seed": Range("seed", 0, 2**31 - 1),
    # Nodes including the root: 2 is the smallest tree that speculates; 1024 the decoder's largest.
    "tree_budget": Range("tree budget", 2, 1024),
    "tree_depth": Range("tree depth", 1, 32),
    "window": Range("W (window)", 1, 64),
    "ngram": Range("N (n-gram size)", 2, 16),
    "guesses": Range("G (guesses)", 0, 64),
}


def check_tree(budget: int, depth: int) -> None:
    if depth >= budget:
        raise InvalidInput("the tree depth must be smaller than the tree budget (the root counts as a node)")


def allowed_presets(limits) -> list[str]:
    """The presets whose target and draft this deployment serves (SPECVIZ_ALLOWED_MODELS)."""
    allowed = []
    for label, models in PRESETS.items():
        try:
            for model_id in models:
                limits.check_model(model_id)
        except InvalidInput:
            continue
        allowed.append(label)
    return allowed


# -- the request ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class RaceRequest:
    """Everything one race is asked to do, under the HTTP API's parameter names.

    The defaults are the page's initial values. Only the prompt has none worth
    guessing; it is still defaulted here so a request can be built field by field.
    """

    prompt: str = "Write a Python function that checks whether a string is a palindrome."
    methods: tuple[str, ...] = DEFAULT_METHODS   # page names or engine ids
    model: str = DEFAULT_PRESET                 # a preset's label, or CUSTOM with the two ids below
    custom_target: str = ""
    custom_draft: str = ""                      # "" = the target's default draft; "self" = the target
    dtype: Dtype = "auto"
    max_new_tokens: int = 96
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = 0
    tree: TreeMode = "auto"
    tree_budget: int | None = 16                # used when tree = "manual"
    tree_depth: int | None = 4
    lookahead: LookaheadMode = "auto"
    window: int | None = 4                      # used when lookahead = "manual"
    ngram: int | None = 3
    guesses: int | None = 4
    pool_from_prompt: bool = True
    graphs: GraphsMode = "auto"                 # last, so the settings before it keep their places

    @classmethod
    def names(cls) -> list[str]:
        """The 19 settings in the order the page and the API list them."""
        return [f.name for f in fields(cls)]

    @classmethod
    def from_values(cls, *values, **named) -> "RaceRequest":
        """From the settings in `names()` order (the page's inputs) and/or by name; unnamed ones default."""
        given = dict(zip(cls.names(), values))
        given.update(named)
        unknown = sorted(set(given) - set(cls.names()))
        if unknown:
            raise InvalidInput(f"unknown race setting {unknown[0]!r}; the settings are {', '.join(cls.names())}")
        return cls(**given)

    def validated(self, limits=None) -> "RaceRequest":
        """This request checked and normalised, or `InvalidInput`. `limits` (specviz.hosting.HostingLimits)
        adds the deployment's caps: prompt length, max new tokens, which models it serves."""
        from .engine.sampling import floored_temperature
        from .engine.text import DEFAULT_MAX_PROMPT_CHARS, validate_prompt

        validate_prompt(self.prompt, limits.max_prompt_chars if limits is not None else DEFAULT_MAX_PROMPT_CHARS)
        methods = _method_ids(self.methods)
        cap = limits.max_new_tokens if limits is not None else None
        numbers = {name: RANGES[name].check(getattr(self, name), cap if name == "max_new_tokens" else None)
                   for name in ("max_new_tokens", "temperature", "top_p")}
        # The decoders' floor (`MIN_TEMPERATURE`): the request records the greedy race it runs.
        numbers["temperature"] = floored_temperature(numbers["temperature"])
        seed = None if self.seed in (None, "") else RANGES["seed"].check(self.seed)
        check_choice("dtype", self.dtype or "auto", DTYPES)
        check_choice("graphs", self.graphs or "auto", GRAPHS_MODES)
        sizes = {}   # each method's settings, checked by its own options module (`request_sizes`)
        for module in map(args_module, method_ids()):
            if module is not None and hasattr(module, "request_sizes"):
                sizes.update(module.request_sizes(self))
        request = replace(self, methods=tuple(methods), dtype=self.dtype or "auto", graphs=self.graphs or "auto",
                          seed=seed,
                          custom_target=(self.custom_target or "").strip(),
                          custom_draft=(self.custom_draft or "").strip(),
                          pool_from_prompt=bool(self.pool_from_prompt), **numbers, **sizes)
        request.models(limits)   # an unknown or refused model pair fails here, before anything loads
        return request

    # -- what the engine needs, from a validated request ----------------------------------------

    def models(self, limits=None) -> tuple[str, str | None]:
        """(target, draft) as `load_pair` takes them; `limits` refuses what this deployment does not serve."""
        if self.model == CUSTOM:
            if limits is not None and not (limits.allow_custom_models or limits.allowed_models_explicit):
                raise InvalidInput("custom model ids are switched off on this server "
                                   "(SPECVIZ_ALLOW_CUSTOM_MODELS); pick a preset")
            target = (self.custom_target or "").strip()
            if not target:
                raise InvalidInput("enter a target model id (or pick a preset)")
            draft = (self.custom_draft or "").strip() or None
            if limits is not None:
                for model_id in (target, None if draft == "self" else draft):
                    limits.check_model(model_id)
            return target, draft
        if self.model not in PRESETS:
            raise InvalidInput(f"unknown model preset {self.model!r}; choose from {', '.join(PRESETS)} "
                               f"or {CUSTOM!r}")
        if limits is not None and self.model not in allowed_presets(limits):
            raise InvalidInput(f"the model pair {self.model!r} is not available on this server")
        return PRESETS[self.model]

    @property
    def label(self) -> str:
        """The model pair as the status line names it while it loads."""
        target, _ = self.models()
        return DEFAULT_PRESET if target == "default" else target

    def sampling(self):
        """The `SamplingConfig` the decoders draw with."""
        from .engine.sampling import SamplingConfig

        try:
            return SamplingConfig(temperature=float(self.temperature), top_p=float(self.top_p),
                                  seed=self.seed).validated()
        except (TypeError, ValueError) as exc:
            raise InvalidInput(str(exc)) from None

    def method_options(self) -> dict[str, dict]:
        """Each raced method's decoder keyword arguments ('auto' sizes are None), from its options module's
        `request_options` (a method with no settings in the request takes none)."""
        modules = {m: args_module(m) for m in self.methods}
        return {m: module.request_options(self) if module is not None and hasattr(module, "request_options") else {}
                for m, module in modules.items()}

    def to_dict(self) -> dict:
        return {**asdict(self), "methods": list(self.methods)}

    @classmethod
    def from_dict(cls, data: dict) -> "RaceRequest":
        """A request as `to_dict` wrote it (a trace's `request`); unknown keys are ignored."""
        known = {k: v for k, v in data.items() if k in cls.names()}
        if "methods" in known:
            known["methods"] = tuple(known["methods"])
        return cls(**known)


def _method_ids(methods) -> list[str]:
    """Method names as the page shows them (or engine ids) -> engine ids, in the order given."""
    if isinstance(methods, str):
        methods = [methods]
    if not methods:
        raise InvalidInput("choose at least one method to run")
    ids = []
    for m in methods:
        mid = METHOD_IDS.get(m, m if m in METHOD_NAMES else None)
        if mid is None:
            raise InvalidInput(f"unknown method {m!r}; choose from {', '.join(METHOD_NAMES.values())}")
        if mid not in ids:
            ids.append(mid)
    return ids


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise InvalidInput(f"unknown {name} {value!r}; choose from {', '.join(choices)}")

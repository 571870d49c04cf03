"""llama.cpp as a peer in `bench`: `llama-cpp` (plain autoregressive) and `llama-cpp-lookup` (its prompt-lookup
drafting, `LlamaPromptLookupDecoding`), through `llama-cpp-python`, an optional extra
(`bash scripts/setup.sh llama`, or part of `setup.sh dev`; the build flags are set there).

What a person who runs the offline default on a laptop CPU runs, so it is the figure to beat there. The
comparison is kept fair the way `runner` keeps transformers' peers fair:
- the same weights: the offline default's own Q4_1 GGUF (`engine.models.offline_default_gguf`), the file our
  `--dtype q4` reads;
- the same input: the token ids SpecViz encodes (its chat template), given to llama.cpp as ids, never a string
  llama.cpp would template or tokenize again;
- the same stopping: max new tokens, or the pair's EOS (kept, as our decoders keep it);
- the same threads (`bench --threads`, else torch's count) for decoding and for the prompt's batch;
- greedy only (temperature 0, top-k 1): llama.cpp's sampler chain cuts top-p before the temperature, so a
  sampled run would not draw from our distribution;
- the same clock: wall time around the whole call, the prompt's evaluation included (our prefill is), the
  KV cache emptied first so no run reuses an earlier run's prompt. Loading the model is not timed (it is
  loaded once per bench, in the warm-up, like our models).

Only on a CPU. Nothing in `specviz.engine` imports this module: llama.cpp is a yardstick, not a decoder of ours.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ..errors import InvalidInput
from ..methodspec import LLAMA_METHODS

INSTALL_HINT = "bash scripts/setup.sh llama"
# LlamaPromptLookupDecoding's own defaults: n-grams up to 2 tokens, 10 tokens proposed per lookup
# (its README: 10 suits a GPU, 2 may suit a CPU better; `bench --llama-lookup-tokens` sets it).
LOOKUP_NGRAM = 2
LOOKUP_TOKENS = 10
# Tokens of context beyond the longest prompt and max new tokens: room for the drafted tokens a lookup
# verifies past the last one kept.
CONTEXT_SLACK = 32


def llama_cpp_module():
    """The `llama_cpp` package, or a one-line message saying how to install it."""
    try:
        import llama_cpp
    except ImportError as exc:
        raise InvalidInput(f"the llama.cpp peers ({', '.join(LLAMA_METHODS)}) need llama-cpp-python, an optional "
                           f"extra: install it with `{INSTALL_HINT}` ({exc})") from None
    return llama_cpp


# What llama.cpp's system info names a feature its build runs (`llama_print_system_info`), and the flag
# /proc/cpuinfo lists for it. The setup builds for the CPU it runs on (AVX-512 where the CPU has it).
BUILD_FEATURES = {"AVX": ("avx",), "AVX2": ("avx2",), "F16C": ("f16c",), "FMA": ("fma",), "BMI2": ("bmi2",),
                  "AVX_VNNI": ("avx_vnni",),
                  "AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
                  "AVX512_VBMI": ("avx512vbmi",), "AVX512_VNNI": ("avx512_vnni",), "AVX512_BF16": ("avx512_bf16",),
                  "AMX_INT8": ("amx_int8",)}


def build_info() -> str:
    """What the installed llama.cpp build runs, as its `llama_print_system_info()` says ("AVX2 = 1 | ...")."""
    system = llama_cpp_module().llama_print_system_info()
    return (system.decode(errors="replace") if isinstance(system, bytes) else str(system)).strip()


def missing_cpu_features(system_info: str, cpu_flags: frozenset[str] | set[str]) -> list[str]:
    """The features a llama.cpp build runs (`AVX512 = 1` in its system info) that this CPU lacks.

    A `.venv` built on one machine may be opened on another (sessions land on an AVX-512 EPYC, an AVX2-only
    one, an Intel Xeon): a build's AVX-512 code on an AVX2-only CPU dies on an illegal instruction, taking
    the whole bench with it. Empty where the CPU's flags cannot be read (nothing to compare against)."""
    if not cpu_flags:
        return []
    built = _built_features(system_info)
    return sorted(name for name, needs in BUILD_FEATURES.items()
                  if name in built and not all(flag in cpu_flags for flag in needs))


# What `scripts/setup.sh` turns on wherever the CPU has it (AMX and AVX-VNNI stay off there).
SETUP_FEATURES = ("AVX", "AVX2", "F16C", "FMA", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16")


def unused_cpu_features(system_info: str, cpu_flags: frozenset[str] | set[str]) -> list[str]:
    """The features this CPU has, that the setup builds for, and that the installed llama.cpp build leaves
    unused: a peer built below the CPU flatters us (an AVX2 build of 0.3.36 decoded 1.1x slower than an
    AVX-512 one on a Zen 4 EPYC). It happens to a `.venv` built on a lesser machine, and it happened to
    ours when pip reused a cached wheel built with other flags."""
    if not cpu_flags:
        return []
    built = _built_features(system_info)
    return [name for name in SETUP_FEATURES
            if name not in built and all(flag in cpu_flags for flag in BUILD_FEATURES[name])]


def _built_features(system_info: str) -> set[str]:
    """The names llama.cpp's system info marks `= 1` ("AVX2 = 1 | AVX512 = 1 | ...")."""
    return {part.split("=")[0].split(":")[-1].strip() for part in system_info.replace("|", "\n").splitlines()
            if part.split("=")[-1].strip() == "1"}


def check_peer(pair, sampling, progress=print) -> None:
    """Fail before anything is timed where a peer cannot run like for like, or cannot run here at all; say so
    (through `progress`) where it runs below what this CPU can."""
    from ..engine.machine import all_cpu_flags
    from ..engine.models import DEFAULT_DISPLAY_NAME

    info, flags = build_info(), all_cpu_flags()
    missing = missing_cpu_features(info, flags)
    if missing:
        raise InvalidInput(f"this llama.cpp build runs {', '.join(missing)}, which this CPU lacks (it was built on "
                           f"another machine): rebuild it here with `{INSTALL_HINT}`")
    unused = unused_cpu_features(info, flags)
    if unused:
        progress(f"warning: this llama.cpp build leaves {', '.join(unused)} unused, which this CPU has, so it runs "
                 f"slower than it could here: rebuild it with `{INSTALL_HINT}`")
    if pair.device.type != "cpu":
        raise InvalidInput(f"the llama.cpp peers run on a CPU only (this bench runs on {pair.device}); "
                           "use --device cpu")
    if pair.target_name != DEFAULT_DISPLAY_NAME:
        raise InvalidInput(f"the llama.cpp peers run the offline default's own GGUF, not {pair.target_name}: "
                           "leave --model at its default")
    if not sampling.greedy:
        raise InvalidInput("the llama.cpp peers run greedy only (temperature 0): llama.cpp's sampler applies "
                           "top-p before the temperature, so its sampled output follows another distribution")


def context_length(longest_prompt: int, max_new_tokens: int) -> int:
    """llama.cpp's context for a bench: the longest prompt, its new tokens and a lookup's overshoot, in 256s."""
    need = longest_prompt + max_new_tokens + CONTEXT_SLACK
    return -(-need // 256) * 256


def llama_settings(method: str, options: dict) -> dict:
    """A peer's knobs: threads, context, and for the lookup its n-gram and tokens per guess."""
    settings = {"n_threads": int(options.get("threads") or torch.get_num_threads()),
                "n_ctx": int(options.get("n_ctx") or 0), "temperature": 0.0, "top_k": 1}
    if method == "llama-cpp-lookup":
        settings.update(max_ngram_size=LOOKUP_NGRAM,
                        num_pred_tokens=int(options.get("lookup_tokens") or LOOKUP_TOKENS))
    return settings


def run_info(method: str, options: dict) -> dict:
    """What `bench --json` records of a peer: its knobs, the library's version and what its build runs on."""
    settings = {k: v for k, v in llama_settings(method, options).items() if v or k != "n_ctx"}  # n_ctx: per record
    return {**settings, "llama_cpp_python": llama_cpp_module().__version__, "system_info": build_info(),
            "gguf": _gguf().name}


def _gguf() -> Path:
    from ..engine.models import offline_default_gguf

    return offline_default_gguf()


def _loaded(pair, method: str, settings: dict):
    """The peer's `Llama`, loaded once per pair and settings (kept on the pair, as `runner` keeps drafts)."""
    llama_cpp = llama_cpp_module()
    key = ("llama.cpp", method, *sorted(settings.items()))
    cache = pair.loaded_beside
    if key not in cache:
        draft = None
        if method == "llama-cpp-lookup":
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            draft = LlamaPromptLookupDecoding(max_ngram_size=settings["max_ngram_size"],
                                              num_pred_tokens=settings["num_pred_tokens"])
        n_ctx = settings["n_ctx"]
        cache[key] = llama_cpp.Llama(model_path=str(_gguf()), n_ctx=n_ctx, n_batch=min(512, n_ctx),
                                     n_threads=settings["n_threads"], n_threads_batch=settings["n_threads"],
                                     draft_model=draft, verbose=False)
    return cache[key]


class _EvalSizes:
    """Counts the peer's forwards and the tokens each took (an `eval` per forward; the prompt is one)."""

    def __init__(self, llm):
        self.sizes: list[int] = []
        self._llm = llm
        self._eval = type(llm).eval
        llm.eval = self._counted   # an instance attribute shadows the method for this run only

    def _counted(self, tokens) -> None:
        if len(tokens):
            self.sizes.append(len(tokens))
        self._eval(self._llm, tokens)

    def close(self) -> None:
        del self._llm.eval


def run_llama(method: str, pair, prompt_ids: list[int], max_new_tokens: int,
              options: dict) -> tuple[list[int], list[int], float, dict]:
    """One timed peer run: (new token ids, tokens per forward, wall seconds, settings)."""
    settings = llama_settings(method, options)
    if not settings["n_ctx"]:
        settings["n_ctx"] = context_length(len(prompt_ids), max_new_tokens)
    llm = _loaded(pair, method, settings)
    eos = pair.eos_token_ids
    tokens: list[int] = []
    counter = _EvalSizes(llm)
    try:
        start = time.perf_counter()
        llm.reset()   # no prefix reuse: every run evaluates its whole prompt, as our prefill does
        steps = llm.generate(prompt_ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0)
        for token in steps:
            tokens.append(int(token))
            if token in eos or len(tokens) >= max_new_tokens:
                break
        steps.close()
        wall = time.perf_counter() - start
    finally:
        counter.close()
    return tokens, counter.sizes, wall, settings

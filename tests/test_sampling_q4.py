"""Sampled output on weight-only layers (`--dtype q4`, `--dtype int8`) follows the quantised target's distribution.

The target's layer products run Q4_1 weights through the int4 kernel (`helpers.attach_quantized`, the quantiser
llama.cpp wrote the offline default's GGUF with), so its distribution is not the dense model's. The reference
is enumerated through the forward the decoders run (`helpers.exact_distribution`), and the check, sample size
and tiny models are `test_sampling_exact.py`'s, whose negative controls show its power. A file of its own, so
that the test workers share the sampling tests' time.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import chi_square_pvalue, exact_distribution, sample_sequences
from test_sampling_exact import (ALPHA, FAMILIES, N_SAMPLES, N_TOKENS, SAMPLING_TREE, SETTINGS, Family, StepRecorder,
                                 make_pair, prepared)

# `--dtype q4`'s forward: the target's layer products on Q4_1 weights through the int4 kernel. Its distribution
# is not the dense model's; the decoders must sample that one, the quantised target's. (T=1 only: the sampler is
# the one the dense families test in both settings; what is new here is the forward.) `--dtype int8`'s forward
# (weight-only int8 products, `kernels.Int8Rows`) runs through the same rows layers with other products.
WEIGHT_ONLY_FAMILIES = {
    "sequoia-independent-fixed-q4": Family("sequoia", "independent", {"tree_parents": SAMPLING_TREE},
                                           weight_only="q4"),
    "lookahead-q4": Family("lookahead", "self", FAMILIES["lookahead"].options, prompt=FAMILIES["lookahead"].prompt,
                           weight_only="q4"),
    "sequoia-independent-fixed-int8": Family("sequoia", "independent", {"tree_parents": SAMPLING_TREE},
                                             weight_only="int8"),
}


@pytest.mark.parametrize("family", list(WEIGHT_ONLY_FAMILIES))
def test_sampling_is_exact_on_weight_only_layers(one_thread, tmp_path, monkeypatch, family):
    fam, sampling = WEIGHT_ONLY_FAMILIES[family], SETTINGS["T1"]
    pair, exact = prepared(fam, sampling, tmp_path, monkeypatch)
    if fam.weight_only == "q4":
        # The 4-bit forward's distribution is another one than the dense model's (total variation 0.056 and 0.069
        # over the four tokens; at N_SAMPLES the check rejects the dense one with probability 0.50 and 0.95): the
        # reference is the quantised target's, read through the forward the decoders run. (int8's moves it by
        # 0.005 only, which no sample of this size tells apart: there the test checks the sampling on its forward.)
        dense = exact_distribution(make_pair(replace(fam, weight_only=""), sampling).target, list(fam.prompt),
                                   sampling, N_TOKENS)
        assert 0.5 * sum(abs(exact.get(s, 0.0) - dense.get(s, 0.0)) for s in exact.keys() | dense.keys()) > 0.04
    steps = StepRecorder()
    samples = sample_sequences(fam.method, pair, list(fam.prompt), sampling, N_SAMPLES, N_TOKENS, on_trace=steps,
                               **fam.options)
    assert chi_square_pvalue(samples, exact) > ALPHA
    assert max(steps.first_depths or [0]) >= 2 or steps.ngram_runs > N_SAMPLES // 10   # speculation was accepted

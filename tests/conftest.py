import pytest
import torch


@pytest.fixture(scope="session")
def pair_fp32():
    """The real offline default (SmolLM2-135M-Instruct), fp32 for exactness tests, target as its own draft."""
    from specviz.models import load_pair

    torch.manual_seed(0)
    return load_pair("default", "self", device="cpu", dtype="fp32")

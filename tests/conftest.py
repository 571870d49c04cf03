import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny models: one thread (a 32-wide matmul split over busy cores mostly waits for the other thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def pair_fp32():
    """The real offline default (SmolLM2-135M-Instruct), fp32 for exactness tests, target as its own draft."""
    from specviz.engine.models import load_pair

    torch.manual_seed(0)
    return load_pair("default", "self", device="cpu", dtype="fp32")


def pytest_configure(config):
    """SPECVIZ_MUTANT=name plants one of `mutants.MUTANTS` for the whole run (`scripts/mutation_check.py`)."""
    import os

    name = os.environ.get("SPECVIZ_MUTANT")
    if name:
        import mutants

        mutants.apply(name)

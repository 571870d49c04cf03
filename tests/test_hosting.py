"""Hosting limits from the environment: tight on a Space, open locally, always explicit when set."""

import pytest

from specviz.errors import InvalidInput
from specviz.hosting import HostingLimits


def test_local_defaults_allow_any_model():
    limits = HostingLimits.from_env({})
    assert not limits.hosted and limits.allow_custom_models
    limits.check_model("someone/any-model")


def test_space_defaults_restrict_models_and_caps():
    limits = HostingLimits.from_env({"SPACE_ID": "org/specviz"})
    assert limits.hosted and not limits.allow_custom_models
    limits.check_model("default")
    limits.check_model("Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(InvalidInput, match="not available here"):
        limits.check_model("evil/remote-code-model")
    with pytest.raises(InvalidInput, match="capped at 256"):
        limits.check_max_new_tokens(1000)


def test_explicit_settings_win():
    limits = HostingLimits.from_env({"SPECVIZ_HOSTED": "1", "SPECVIZ_ALLOWED_MODELS": "default, my/model",
                                     "SPECVIZ_MAX_NEW_TOKENS": "64", "SPECVIZ_QUEUE_SIZE": "3"})
    assert limits.allowed_models == ("default", "my/model")
    assert limits.max_new_tokens == 64 and limits.queue_size == 3
    limits.check_model("my/model")
    with pytest.raises(InvalidInput):
        limits.check_model("HuggingFaceTB/SmolLM2-1.7B-Instruct")


def test_bad_environment_value_is_named():
    with pytest.raises(InvalidInput, match="SPECVIZ_MAX_NEW_TOKENS"):
        HostingLimits.from_env({"SPECVIZ_MAX_NEW_TOKENS": "lots"})

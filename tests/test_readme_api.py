"""The README's `gradio_client` example, extracted from the README and run as written against a launched app.

Only the address changes (the app listens on a free port here). The example prints
each method's token count and checks that every method's greedy fp32 text equals
autoregressive decoding's; this test holds it to that.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

# Required dependencies: a missing one fails collection loudly instead of skipping.
import gradio as gr  # noqa: E402,F401   module level: Gradio resolves handlers' `gr.Request` annotations here
import gradio_client  # noqa: E402

from helpers import served  # noqa: E402

README = Path(__file__).resolve().parent.parent / "README.md"
EXAMPLE_URL = "http://127.0.0.1:7860/"


def readme_api_example() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## The HTTP API\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the API section should hold one python example"
    return blocks[0]


def test_readme_example_names_the_race_endpoint_and_its_parameters():
    from specviz.ui.layout import DEFAULT_PRESET, METHOD_NAMES

    code = readme_api_example()
    assert f'Client("{EXAMPLE_URL}")' in code and 'api_name="/race"' in code
    assert f'model="{DEFAULT_PRESET}"' in code
    for name in METHOD_NAMES.values():
        assert f'"{name}"' in code
    params = ("prompt, methods, model, custom_target, custom_draft, dtype, max_new_tokens, temperature, top_p, "
              "seed, tree, tree_budget, tree_depth, lookahead, window, ngram, guesses, pool_from_prompt").split(", ")
    for param in params:
        assert re.search(rf"\b{param}=", code), param


def test_readme_example_runs_against_the_app():
    from specviz.ui import build_demo

    code = readme_api_example()
    with served(build_demo()) as url:
        # The README's API table lists what the app serves.
        api = gradio_client.Client(url, verbose=False).view_api(print_info=False, return_format="dict")
        named = set(api["named_endpoints"])
        assert {"/race", "/stop", "/show_step", "/prev", "/next", "/load_trace"} <= named
        race_params = [p["parameter_name"] for p in api["named_endpoints"]["/race"]["parameters"]]
        section = README.read_text(encoding="utf-8").split("\n## The HTTP API\n", 1)[1]
        assert f"`{', '.join(race_params)}`" in section

        namespace: dict = {}
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code.replace(EXAMPLE_URL, url), "README.md (The HTTP API)", "exec"), namespace)
    out = printed.getvalue()
    assert set(namespace["runs"]) == {"ar", "sequoia", "lookahead"}
    assert all(run["error"] is None for run in namespace["runs"].values())
    assert len(namespace["runs"]["ar"]["token_ids"]) > 0
    assert namespace["same"] is True, out
    assert "every method wrote what autoregressive wrote: True" in out

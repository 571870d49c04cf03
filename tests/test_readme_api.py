"""The README's `gradio_client` example, extracted from the README and run as written against a launched app.

Only the address changes (the app listens on a free port here), and the app's defaults are small fp32 sizes
so the race is short and exact. The example passes the prompt alone: every other setting is the request's
default (docs/api.md lists them; tests/test_app.py holds that page to the code).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import gradio_client

from helpers import served

README = Path(__file__).resolve().parent.parent / "README.md"
EXAMPLE_URL = "http://127.0.0.1:7860/"
SMALL = {"max_new_tokens": 12, "dtype": "fp32", "tree": "manual", "tree_budget": 8, "tree_depth": 3,
         "lookahead": "manual", "window": 3, "ngram": 3, "guesses": 3}


def readme_api_example() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## The HTTP API\n")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the API section should hold one python example"
    return blocks[0]


def test_readme_example_passes_the_prompt_alone_to_the_race_endpoint():
    code = readme_api_example()
    assert f'Client("{EXAMPLE_URL}")' in code
    assert re.search(r'\.predict\("[^"]+", api_name="/race"\)', code)


def test_readme_example_runs_against_the_app():
    from specviz.ui import build_demo

    code = readme_api_example()
    namespace: dict = {}
    printed = io.StringIO()
    with served(build_demo(defaults=SMALL)) as url, contextlib.redirect_stdout(printed):
        exec(compile(code.replace(EXAMPLE_URL, url), "README.md (The HTTP API)", "exec"), namespace)
    result = namespace["result"]
    assert set(result["methods"]) == {"ar", "sequoia", "lookahead"}
    for method in ("sequoia", "lookahead"):   # greedy fp32: the same token ids as autoregressive
        assert result["methods"][method]["identical_to_ar"] is True
        assert result["methods"][method]["token_ids"] == result["methods"]["ar"]["token_ids"]
    lines = printed.getvalue().splitlines()[-4:]   # gradio_client may print "Loaded as API" first
    assert [line.split()[0] for line in lines[:3]] == ["ar", "sequoia", "lookahead"]
    assert Path(lines[-1]).is_file() and Path(lines[-1]) == Path(result["trace"])

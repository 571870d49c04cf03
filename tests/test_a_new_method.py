"""A method registered from a test module reaches the CLI, the API's request, the page and a trace round trip:
its record and one registration line are all a method needs. In a child process, so the registration is
made before the package builds its lists (and this process's lists stay as they are)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CHILD = r'''
import json
import specviz.methods as methods
methods.REGISTERED = methods.REGISTERED + ("toy_method",)   # the one registration line

from specviz.cli import main
from specviz.request import RaceRequest
from specviz.trace import RaceTrace
from specviz.ui import controls, views

out = {}
out["request"] = list(RaceRequest(methods=("Autoregressive", "Toy")).validated().methods)
out["default"] = list(RaceRequest().validated().methods)
out["columns"] = list(views.COLUMNS)
out["outputs"] = [n for n in controls.RACE_OUTPUTS if n.endswith("_toy")]
out["status"] = main(["generate", "--method", "toy", "--prompt", "Say hi.", "--max-new-tokens", "4", "--json",
                      "--dtype", "fp32", "--quiet"])
'''


def test_a_method_registered_from_a_test_module_reaches_the_cli_api_page_and_trace(tmp_path):
    code = CHILD + r'''
from specviz.engine.methods import make_decoder
from specviz.engine.models import load_pair
pair = load_pair("default", "self", dtype="fp32")
runs = {m: make_decoder(m, pair, "Say hi.", max_new_tokens=4).run() for m in ("ar", "toy")}
race = RaceTrace(prompt="Say hi.", prompt_token_ids=runs["ar"].prompt_token_ids, methods=["ar", "toy"], runs=runs,
                 order=[[m, i] for m in ("ar", "toy") for i in range(len(runs[m].steps))], vocab_size=pair.vocab_size)
again = RaceTrace.from_json(race.to_json(), vocab_size=pair.vocab_size)
out["round_trip"] = again.runs["toy"].token_ids == runs["ar"].token_ids and again.runs["toy"].method == "toy"
from specviz.ui import html, narrate
out["column"] = "Toy" in html.stats_html("toy", again.runs["toy"])
toy_step = next(i for i, (m, _) in enumerate(again.order, 1) if m == "toy")
out["caption"] = "its own way" in narrate.caption_html(again, toy_step)
out["ar_caption"] = "its own way" in narrate.caption_html(again, 1)
print("RESULT " + json.dumps(out))
'''
    done = subprocess.run([sys.executable, "-c", code], cwd=TESTS, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": f"{TESTS}:{TESTS.parent}"})
    line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line is not None, done.stdout[-2000:] + done.stderr[-3000:]
    out = json.loads(line[len("RESULT "):])
    assert out["request"] == ["ar", "toy"]
    assert "toy" not in out["default"]   # registered, not raced unless asked for
    assert out["columns"][-1] == "toy" and out["outputs"] == ["stats_toy", "text_toy"]
    assert out["status"] == 0 and '"method": "toy"' in done.stdout
    assert out["round_trip"] and out["column"]
    assert out["caption"] and not out["ar_caption"]   # its own narrator, and only for its steps


def test_each_method_is_named_in_at_most_four_files_outside_its_folder():
    """A method lives in its folder: the rest of the package reads its record (`specviz.methods`), so its id
    appears in few other files (today: the trace's payload kind and the request's Lookahead field)."""
    import specviz
    from specviz.methods import registered

    package = Path(specviz.__file__).parent
    sources = {p: p.read_text() for p in package.rglob("*.py")}
    for method_id, record in registered().items():
        folder = package / record.decoder.split(":")[0].split(".")[1]
        naming = sorted(str(p.relative_to(package)) for p, text in sources.items()
                        if f'"{method_id}"' in text and folder not in p.parents)
        assert len(naming) <= 4, (method_id, naming)
        # Its own folder names it (its record): the count above is not vacuous.
        assert any(f'"{method_id}"' in text for p, text in sources.items() if folder in p.parents), method_id

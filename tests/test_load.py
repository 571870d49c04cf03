"""Issue 8 load test: 8 concurrent gradio_client clients against one local launch (loopback only).

The queue is bounded (SPECVIZ_QUEUE_SIZE=4) and runs one race at a time, so each
client either completes with the correct greedy output (all three columns equal
to plain autoregressive decoding) or is told at once that the queue is full;
queued clients see their position. Afterwards the server answers a normal request.
"""

from __future__ import annotations

import html as htmllib
import re
import threading
import time

import pytest

# A required dependency: a missing one fails collection loudly instead of skipping.
import gradio_client  # noqa: E402
from specviz.methods import method_ids  # noqa: E402
from gradio_client.utils import QueueError, Status  # noqa: E402

CLIENTS = 8
QUEUE_SIZE = 4
MAX_NEW = 12
PROMPT = "Write a Python function that reverses a string."


from helpers import served  # noqa: E402


@pytest.fixture(scope="module")
def server_url():
    from specviz.ui import build_demo

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_QUEUE_SIZE", str(QUEUE_SIZE))
        demo = build_demo()
    with served(demo) as url:
        yield url


@pytest.fixture(scope="module")
def expected_ids(pair_fp32):
    """Plain autoregressive decoding's token ids, which all three columns must have written."""
    from specviz.autoregressive.decoder import AutoregressiveDecoder
    from specviz.engine.sampling import SamplingConfig
    from specviz.engine.text import encode_prompt

    ids = encode_prompt(pair_fp32.tokenizer, PROMPT)
    return AutoregressiveDecoder(pair_fp32, PROMPT, ids, SamplingConfig(), MAX_NEW).run().token_ids


def race_token_ids(result) -> list[list[int]]:
    """The three methods' token ids, from the race's downloadable trace (the columns show only text)."""
    import os
    from pathlib import Path

    from specviz.trace import RaceTrace

    files = [r for r in result if isinstance(r, str) and r.endswith(".json") and os.path.isfile(r)]
    assert len(files) == 1, f"no single trace file among the race's outputs: {files}"
    runs = RaceTrace.from_json(Path(files[0]).read_text()).runs
    return [runs[m].token_ids for m in ("ar", "sequoia", "lookahead")]


@pytest.fixture(scope="module")
def expected_text(pair_fp32):
    from specviz.autoregressive.decoder import AutoregressiveDecoder
    from specviz.engine.sampling import SamplingConfig
    from specviz.engine.text import encode_prompt

    ids = encode_prompt(pair_fp32.tokenizer, PROMPT)
    trace = AutoregressiveDecoder(pair_fp32, PROMPT, ids, SamplingConfig(), MAX_NEW).run()
    return "".join(t for s in trace.steps for t in s.new_token_texts)


def run_args():
    from specviz.ui.layout import DEFAULT_PRESET

    return dict(prompt=PROMPT, methods=["Autoregressive", "Sequoia", "Lookahead"], model=DEFAULT_PRESET, custom_target="", custom_draft="",
                dtype="fp32", max_new_tokens=MAX_NEW, temperature=0.0, top_p=1.0, seed=0, tree="manual",
                tree_budget=6, tree_depth=3, lookahead="manual", window=3, ngram=3, guesses=3, pool_from_prompt=True)


def column_texts(result) -> list[str]:
    # After the columns' headers come their texts (`ui.controls.RACE_OUTPUTS`): AR's, Sequoia's, Lookahead's.
    start = len(method_ids())
    return [htmllib.unescape(re.sub(r"<[^>]+>", "", frag)).replace("⏎", "\n") for frag in result[start:start + 3]]


def test_eight_concurrent_clients_complete_or_hear_queue_is_full(server_url, expected_text, expected_ids):
    clients = [gradio_client.Client(server_url, verbose=False) for _ in range(CLIENTS)]
    outcomes: list[tuple[str, object] | None] = [None] * CLIENTS
    positions: list[int] = []
    start = threading.Barrier(CLIENTS)

    def visit(i: int) -> None:
        start.wait()
        try:
            job = clients[i].submit(**run_args(), api_name="/race_stream")
            while not job.done():
                status = job.status()
                if status.code == Status.IN_QUEUE and status.rank is not None:
                    positions.append(status.rank)
                time.sleep(0.05)
            outcomes[i] = ("done", job.result(timeout=10))
        except QueueError as exc:
            outcomes[i] = ("busy", str(exc))
        except Exception as exc:  # anything else is a failure the assertions below report
            outcomes[i] = ("error", f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=visit, args=(i,), daemon=True) for i in range(CLIENTS)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240 - (time.monotonic() - began))
    assert not any(t.is_alive() for t in threads), "a client hung"

    done = [o[1] for o in outcomes if o and o[0] == "done"]
    busy = [o[1] for o in outcomes if o and o[0] == "busy"]
    errors = [o[1] for o in outcomes if not o or o[0] == "error"]
    assert not errors, errors
    assert len(done) + len(busy) == CLIENTS
    assert 1 <= len(done) <= CLIENTS and len(done) >= min(CLIENTS, QUEUE_SIZE)
    for result in done:
        assert race_token_ids(result) == [expected_ids] * 3
        assert column_texts(result) == [expected_text] * 3
    for message in busy:
        assert "queue is full" in message.lower()
    # Queued clients were told their place in line (Gradio's rank, shown as "queue: N/M" in the browser).
    if len(done) > 1:
        assert positions and max(positions) >= 1
    print(f"\nload: {len(done)} completed, {len(busy)} told the queue is full, "
          f"max queue position seen {max(positions, default=0)}, {time.monotonic() - began:.1f} s")

    # The server is still up and answers a normal request afterwards.
    after = gradio_client.Client(server_url, verbose=False).predict(**run_args(), api_name="/race_stream")
    assert race_token_ids(after) == [expected_ids] * 3
    assert column_texts(after) == [expected_text] * 3

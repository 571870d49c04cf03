"""A room of thirty pressing Start within the same second (issue 54), without a GPU.

On ZeroGPU (app.py as a Space runs it, with the stand-in `spaces` of test_hosting, whose decorator runs
each call here and counts the calls in flight) every one of 30 gradio_client clients is served, several
races run at once, and every method's greedy fp32 text equals plain autoregressive decoding's, whether the
races step over shared static sessions (graphs "on") or their own caches ("auto"). Locally, where races
share one device, the same burst runs one race at a time: each client is served or told at once that the
queue is full. Both servers refuse an upload over their trace limit in plain words.
"""

from __future__ import annotations

import threading
import time

import pytest
from gradio_client import Client, handle_file
from gradio_client.utils import QueueError

from helpers import served
from test_hosting import run_app

CLIENTS = 30
MAX_NEW = 8
PROMPT = "Write a haiku about trees"
# Small explicit sizes (nothing to measure first), greedy, fp32: every column must equal autoregressive.
RACE = dict(dtype="fp32", max_new_tokens=MAX_NEW, temperature=0.0, tree="manual", tree_budget=6, tree_depth=3,
            lookahead="manual", window=3, ngram=3, guesses=3)
TRACE_LIMIT_MB = 1
LOCAL_QUEUE = 8


@pytest.fixture(scope="module")
def expected_ids(pair_fp32):
    from specviz.autoregressive.decoder import AutoregressiveDecoder
    from specviz.engine.sampling import SamplingConfig
    from specviz.engine.text import encode_prompt

    ids = encode_prompt(pair_fp32.tokenizer, PROMPT)
    return AutoregressiveDecoder(pair_fp32, PROMPT, ids, SamplingConfig(), MAX_NEW).run().token_ids


def burst(url: str, graphs_of=lambda i: "auto") -> dict:
    """CLIENTS clients call /race at once (each its own session); their outcomes, in order, and the wall time."""
    clients = [Client(url, verbose=False) for _ in range(CLIENTS)]
    outcomes: list = [None] * CLIENTS
    start = threading.Barrier(CLIENTS)

    def visit(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = ("served", clients[i].predict(PROMPT, **RACE, graphs=graphs_of(i), api_name="/race"))
        except QueueError as exc:
            outcomes[i] = ("refused", str(exc))
        except Exception as exc:   # anything else is a failure the caller reports
            outcomes[i] = ("error", f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=visit, args=(i,), daemon=True) for i in range(CLIENTS)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(1.0, 420 - (time.monotonic() - began)))
    assert not any(thread.is_alive() for thread in threads), "a client hung"
    return {"outcomes": outcomes, "wall_s": time.monotonic() - began}


def served_results(run: dict, expected_ids) -> tuple[list, list]:
    """The served results (each checked: every method wrote autoregressive's tokens) and the refusals."""
    outcomes = run["outcomes"]
    errors = [o for o in outcomes if o is None or o[0] == "error"]
    assert not errors, errors[:3]
    served_ = [o[1] for o in outcomes if o[0] == "served"]
    refused = [o[1] for o in outcomes if o[0] == "refused"]
    assert len(served_) + len(refused) == CLIENTS   # none lost
    for result in served_:
        assert result["dtype"] == "fp32"
        for method, run_ in result["methods"].items():
            assert run_["error"] is None, (method, run_["error"])
            assert run_["token_ids"] == expected_ids, method
    return served_, refused


def oversized_trace(tmp_path):
    path = tmp_path / "too-big.json"
    path.write_bytes(b" " * (TRACE_LIMIT_MB * 2**20 + 4096))
    return path


@pytest.fixture(scope="module")
def zerogpu_app():
    import torch

    threads = torch.get_num_threads()
    # Ten races at once in this process share two cores: one torch thread each, not two spinning per race.
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        # Each race asks ZeroGPU for seconds estimated from a GPU's forward times; here thirty share two CPU
        # cores, so every race asks for the cap and none meets its own clock before its 8 tokens.
        mp.setattr("specviz.hosting.ZEROGPU_MIN_S", 120)
        # Only the offline default preloaded: the room's races load one pair more (fp32) and nothing else.
        demo, spaces = run_app(mp, {"SPACE_ID": "org/specviz", "SPACES_ZERO_GPU": "true",
                                    "SPECVIZ_ALLOWED_MODELS": "default", "SPECVIZ_MAX_TRACE_MB": str(TRACE_LIMIT_MB)})
        from specviz.ui import launch_kwargs

        uploads = launch_kwargs()
        assert uploads["max_file_size"] == TRACE_LIMIT_MB * 2**20   # hosted: Gradio refuses larger uploads
        try:
            with served(demo, max_file_size=uploads["max_file_size"]) as url:
                yield url, spaces
        finally:
            torch.set_num_threads(threads)


# Thirty visitors at once is a load test: beside another test worker its clients' reads time out (twice on
# 2 cores), so it runs with the machine to itself (scripts/test.sh).
@pytest.mark.alone
def test_zerogpu_serves_a_room_of_thirty_in_parallel(zerogpu_app, expected_ids):
    from specviz.hosting import HostingLimits

    url, spaces = zerogpu_app
    limits = HostingLimits.from_env()
    assert limits.race_concurrency >= 4 and limits.queue_size >= CLIENTS
    calls_before = spaces.calls
    # Half the room steps over static sessions kept on the shared model (graphs "on"), half over caches of
    # its own: no race may write another's KV cache or buffers.
    run = burst(url, graphs_of=lambda i: "on" if i % 2 else "auto")
    served_, refused = served_results(run, expected_ids)
    print(f"\nZeroGPU path: {len(served_)} served, {len(refused)} refused, peak {spaces.peak} races in flight, "
          f"{run['wall_s']:.1f} s")
    assert len(served_) == CLIENTS and not refused
    assert spaces.calls - calls_before == CLIENTS
    assert spaces.peak >= 4


def test_one_race_in_flight_per_visitor(zerogpu_app):
    from specviz.ui.racing import Visitors

    url, _ = zerogpu_app
    client = Client(url, verbose=False)   # one visitor: one session
    jobs = [client.submit(PROMPT, **RACE, api_name="/race") for _ in range(2)]
    outcomes = []
    for job in jobs:
        try:
            outcomes.append(("served", job.result(timeout=120)))
        except Exception as exc:
            outcomes.append(("refused", str(exc)))
    assert sorted(kind for kind, _ in outcomes) == ["refused", "served"], outcomes
    assert [said for kind, said in outcomes if kind == "refused"][0].startswith(Visitors.ONE_RACE[:40])
    # The visitor's place is free again: their next race runs.
    assert client.predict(PROMPT, **RACE, api_name="/race")["methods"]["ar"]["tokens"] == MAX_NEW


def test_a_spent_zerogpu_quota_reads_as_advice(zerogpu_app):
    import gradio as gr

    url, spaces = zerogpu_app
    # What `spaces` (0.51, spaces/zero/client.py) raises for a visitor whose daily quota is spent.
    spaces.refusal = gr.Error("You have exceeded your free ZeroGPU quota (18s requested vs. 4s left). "
                              "Try again in 5:12:00.", title="ZeroGPU quota exceeded", print_exception=False)
    try:
        with pytest.raises(Exception) as refused:
            Client(url, verbose=False).predict(PROMPT, **RACE, api_name="/race")
    finally:
        spaces.refusal = None
    said = str(refused.value)
    assert "Log in to Hugging Face" in said and "Try again in 5:12:00" in said and "Traceback" not in said


def test_a_hosted_server_refuses_an_oversized_upload(zerogpu_app, tmp_path):
    import httpx

    url, _ = zerogpu_app
    big = oversized_trace(tmp_path)
    # The page's limit reaches the clients: gradio_client (like the browser) will not send the file.
    with pytest.raises(ValueError, match=f"maximum file size of {TRACE_LIMIT_MB * 2**20} bytes"):
        Client(url, verbose=False).predict(handle_file(str(big)), api_name="/load_trace")
    # A client that sends it anyway is cut off while it arrives, with a plain answer, and nothing lands.
    with big.open("rb") as body:
        answer = httpx.post(f"{url}gradio_api/upload", files={"files": ("too-big.json", body)}, timeout=60)
    assert answer.status_code == 413 and "maximum allowed size" in answer.text


@pytest.fixture(scope="module")
def local_app():
    from specviz.ui import build_demo

    with pytest.MonkeyPatch.context() as mp:
        for name in ("SPACE_ID", "SPACES_ZERO_GPU", "SPECVIZ_HOSTED", "SPECVIZ_CONCURRENCY"):
            mp.delenv(name, raising=False)
        mp.setenv("SPECVIZ_MAX_TRACE_MB", str(TRACE_LIMIT_MB))
        # Half the local default (16): one race at a time, so each place in the queue is a race the test waits
        # for; the burst is queued or refused the same way.
        mp.setenv("SPECVIZ_QUEUE_SIZE", str(LOCAL_QUEUE))
        demo = build_demo()
        # Served inside the same environment: the worker starts with the first race and reads it (the ZeroGPU
        # app's SPACE_ID would make it a hosted worker, with the threads of a machine that serves no page).
        with served(demo) as url:
            yield url, demo


def test_locally_the_room_is_queued_or_refused_cleanly(local_app, expected_ids):
    from specviz.hosting import HostingLimits

    url, _ = local_app
    limits = HostingLimits.from_env({})
    assert limits.race_concurrency == 1 and limits.shared_device_note() == ""
    run = burst(url)
    served_, refused = served_results(run, expected_ids)
    print(f"\nlocal path: {len(served_)} served, {len(refused)} refused, 1 race in flight at a time, "
          f"{run['wall_s']:.1f} s")
    assert len(served_) >= LOCAL_QUEUE   # the queue's places, and the race that ran first
    assert refused and all("queue is full" in said.lower() for said in refused)


def test_an_oversized_trace_is_refused_before_it_is_read(local_app, tmp_path):
    # No upload limit locally: the app itself checks the size on disk, before reading the file.
    url, _ = local_app
    with pytest.raises(Exception) as refused:
        Client(url, verbose=False).predict(handle_file(str(oversized_trace(tmp_path))), api_name="/load_trace")
    assert f"the limit is {TRACE_LIMIT_MB} MB" in str(refused.value)



PROMPTS = ("Write a haiku about trees", "Name three rivers in Europe.", "What is 17 times 3?",
           "Describe a cat in one sentence.")


def races_at_once(pair) -> tuple[dict, dict]:
    """Each of PROMPTS raced by all three methods at once, one thread each, in this process (as ZeroGPU's
    parallel calls would run beside each other), over the graph sessions kept on the shared model (graphs
    "on": on a CPU each step runs eagerly over the buffers a GPU graph would replay). After one race first,
    so that kept sessions exist to be taken. Returns ({prompt: {method: ids}}, {prompt: AR's ids alone})."""
    from specviz.autoregressive.decoder import AutoregressiveDecoder
    from specviz.runtime.race import start_race
    from specviz.engine.sampling import SamplingConfig
    from specviz.engine.text import encode_prompt
    from specviz.request import RaceRequest

    options = RaceRequest(prompt="x", **{k: v for k, v in RACE.items() if k != "dtype"}).validated().method_options()

    def race(prompt: str) -> dict:
        one = start_race(pair, prompt, ["ar", "sequoia", "lookahead"], sampling=SamplingConfig(),
                         max_new_tokens=MAX_NEW, options=options, graphs="on")
        try:
            one.run()
            return {m: one.runs[m].token_ids for m in one.methods}
        finally:
            one.close()

    race(PROMPTS[0])
    start, got = threading.Barrier(len(PROMPTS)), {}

    def visit(prompt: str) -> None:
        start.wait()
        got[prompt] = race(prompt)

    threads = [threading.Thread(target=visit, args=(p,)) for p in PROMPTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    alone = {p: AutoregressiveDecoder(pair, p, encode_prompt(pair.tokenizer, p), SamplingConfig(), MAX_NEW).run()
             .token_ids for p in PROMPTS}
    return got, alone


def test_races_at_once_keep_their_own_decoding_state(pair_fp32, one_thread):
    got, alone = races_at_once(pair_fp32)
    for prompt in PROMPTS:
        assert got[prompt] == {m: alone[prompt] for m in ("ar", "sequoia", "lookahead")}, prompt


def test_races_at_once_negative_control_one_shared_session(pair_fp32, one_thread):
    # The test above has power: when a race may take a kept session another race is using (one KV cache and
    # one set of buffers written by two races), some column stops matching autoregressive decoding.
    import mutants

    with mutants.mutated("checkout-shares-a-session"):
        got, alone = races_at_once(pair_fp32)
    assert any(got[p][m] != alone[p] for p in PROMPTS for m in ("ar", "sequoia", "lookahead"))


def worker_processes() -> set[int]:
    """This process's children that are decoding workers (Linux: /proc)."""
    from pathlib import Path

    def read(path: Path, kind=str):
        # A thread (or a child) may end between the listing and the read: it then has no children (no worker).
        try:
            return path.read_text() if kind is str else path.read_bytes()
        except OSError:
            return "" if kind is str else b""

    pids = {int(pid) for f in Path("/proc/self/task").glob("*/children") for pid in read(f).split()}
    return {pid for pid in pids if b"specviz.runtime.worker" in read(Path(f"/proc/{pid}/cmdline"), bytes)}


def test_a_host_that_raises_concurrency_gets_a_worker_per_race_and_a_note(monkeypatch, expected_ids):
    # Off ZeroGPU races share one device: a host may still run two at once, each in a worker of its own
    # (a worker runs one race), and the page then says that speeds are shared.
    from test_load import race_token_ids, run_args

    from specviz.ui import build_demo

    for name in ("SPACE_ID", "SPACES_ZERO_GPU", "SPECVIZ_HOSTED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPECVIZ_CONCURRENCY", "2")
    before = worker_processes()
    demo = build_demo()
    with served(demo) as url:
        results = [None, None]

        def visit(i: int) -> None:
            args = {**run_args(), "prompt": PROMPT, "max_new_tokens": MAX_NEW}
            results[i] = Client(url, verbose=False).predict(**args, api_name="/race_stream")

        threads = [threading.Thread(target=visit, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert len(worker_processes() - before) == 2
    for result in results:
        assert race_token_ids(result) == [expected_ids] * 3
        status = [v for v in result if isinstance(v, str) and v.startswith("Done.")]
        assert status and "speeds are shared" in status[0]

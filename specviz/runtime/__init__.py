"""The app's runtime, over the engine: a race of several decoders stepped least-compute-first (`race.py`), the
decoding worker process the page races in (`worker.py`), and what `auto` changed between two races and why
(`auto_notes.py`). The engine (models, the forward, the decoding contract, profiling) never imports it; the UI,
the command line and the served app do.
"""

"""The shared engine: model pairs, the lean forward, sampling, profiling, the decoder interface, the race.

Nothing here imports a method's folder or a draft by name (the registries in
`methods.py` and `drafts.py` name them as strings) and nothing imports the UI.
The Llama layer's arithmetic is `llama.py`, once; the CPU kernels the forwards
multiply with (oneDNN prepacking, int8 linears) are `cpu_kernels.py`.
"""

"""The shared engine: model pairs, the lean forward, sampling, profiling, the decoder interface (the race and the
worker that run decoders for the app are `specviz.runtime`, over this).

Nothing here imports a method's folder or a draft by name (the registries in
`methods.py` and `drafts.py` name them as strings) and nothing imports the UI.
The Llama layer's arithmetic is `llama.py` (the C++ `q4_layer` of `csrc/q4_rows.cpp` its fast path on an
AVX-512 VNNI CPU); the kernels it multiplies through are `kernels.py` (oneDNN prepacking, torch's and fbgemm's
int8, torch's int4, the 4-bit and Q8_0 products on SpecViz's kernel), and what makes their weights `quant.py`.
"""

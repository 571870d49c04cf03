"""Lookahead decoding (Fu et al. 2023): Jacobi iterations over a 2-D window fill an n-gram pool the target verifies.

- `pool.py`: the n-gram pool (LRU per key);
- `window.py`: where every token of a step sits (order, positions, attention mask);
- `verify.py`: greedy and exact sampling verification of pool candidates, on the device;
- `sizing.py`: W, N, G chosen from the measured forward cost (`--lookahead auto`);
- `decoder.py`: the decoder (one step = one target forward);
- `cli.py`: `optimize-lookahead`;
- `method.py`: its record (`specviz.methods.Method`), what every list of methods reads; `options.py`: its
  size flags, their decoder options and its spec syntax (`@...`).
"""

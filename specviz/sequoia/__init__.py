"""Sequoia (Chen et al. 2024): a draft proposes a DP-optimal token tree, the target verifies it in one forward.

- `tree_dp.py`: the optimal tree shape for an acceptance vector (dynamic programming);
- `tree.py`: a tree's structure, masks, positions and index tensors, prepared once per shape;
- `verify.py`: the verification walk (greedy, and sampling without replacement, exact at any temperature);
- `acceptance.py`, `measure.py`: acceptance vectors, found and measured;
- `sizing.py`: the tree size and depth chosen from measured forward times (`--tree auto`), resolved
  before a decoder is built (`tree_choice`);
- `decoder.py`: the decoder (one step = one target forward), drafting through `specviz.draft.drafter`;
- `cli.py`: `tree-dp`, `profile-acceptance`, `optimize-tree`;
- `method.py`: its record (`specviz.methods.Method`), what every list of methods reads; `options.py`: its
  size flags, their decoder options and its spec syntax (`@...`).
"""

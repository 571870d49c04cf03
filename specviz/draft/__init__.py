"""Drafts for the offline default and how they are made.

- `drafter.py`: the interface a tree decoder drafts through (`Drafter`), and the independent
  draft's (`ModelDrafter`, the target drafting for itself included);
- `pruned.py`: a draft cut from the target's layers (embeddings shared), saved and assembled;
- `feature.py`: a draft reading the target's hidden states (EAGLE style), saved and assembled;
  `feature_drafter.py` its drafter; `featuretrain.py` how it is trained;
- `vocab.py`: the token ids a draft's head keeps;
- `data.py`: the target's own answers and offline text, as distillation batches;
- `train.py`: the distillation loop; `evaluate.py`: held-out agreement;
- `cli.py`: `distill`, `draft-vocab`, `draft-eval`.
"""

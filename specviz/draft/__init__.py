"""Drafts for the offline default and how they are made.

- `pruned.py`: a draft cut from the target's layers (embeddings shared), saved and assembled;
- `vocab.py`: the token ids a draft's head keeps;
- `data.py`: the target's own answers and offline text, as distillation batches;
- `train.py`: the distillation loop; `evaluate.py`: held-out agreement;
- `cli.py`: `distill`, `draft-vocab`, `draft-eval`.
"""

_OLD_NAMES = ("specviz.draft.pruned", "specviz.draft.vocab")   # before the regroup, `specviz.draft` was one module


def __getattr__(name: str):
    import importlib

    for module_name in _OLD_NAMES:
        module = importlib.import_module(module_name)
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module 'specviz.draft' has no attribute {name!r}")

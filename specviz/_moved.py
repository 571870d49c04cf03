"""Old module names from before the package was regrouped into one folder per method.

Scripts and notebooks written against the flat layout (`specviz.tree_dp`,
`specviz.decoders.sequoia`, `specviz.distill`, ...) keep working: importing an old
name gives a module that forwards every attribute to the new module(s) and warns
once where the name went. Nothing inside the package uses these names (a test
checks that).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

# old module -> the new modules its names now live in (searched in order)
MOVED: dict[str, tuple[str, ...]] = {
    "specviz.models": ("specviz.engine.models", "specviz.paths"),
    "specviz.lean": ("specviz.engine.lean",),
    "specviz.kvcache": ("specviz.engine.kvcache",),
    "specviz.sampling": ("specviz.engine.sampling",),
    "specviz.text": ("specviz.engine.text",),
    "specviz.profiler": ("specviz.engine.profiler",),
    "specviz.race": ("specviz.engine.race", "specviz.trace"),
    "specviz.decoders": ("specviz.engine.methods",),
    "specviz.decoders.base": ("specviz.engine.decoder",),
    "specviz.decoders.autoregressive": ("specviz.autoregressive.decoder",),
    "specviz.decoders.sequoia": ("specviz.sequoia.decoder", "specviz.sequoia.sizing"),
    "specviz.decoders.lookahead": ("specviz.lookahead.decoder",),
    "specviz.tree_dp": ("specviz.sequoia.tree_dp",),
    "specviz.tree": ("specviz.sequoia.tree",),
    "specviz.verification": ("specviz.sequoia.verify",),
    "specviz.acceptance": ("specviz.sequoia.acceptance", "specviz.sequoia.measure"),
    "specviz.optimizer": ("specviz.sequoia.sizing",),
    "specviz.sequoia_cli": ("specviz.sequoia.cli",),
    "specviz.ngram_pool": ("specviz.lookahead.pool",),
    "specviz.lookahead_layout": ("specviz.lookahead.window",),
    "specviz.lookahead_rules": ("specviz.lookahead.verify",),
    "specviz.lookahead_auto": ("specviz.lookahead.sizing", "specviz.lookahead.cli"),
    "specviz.distill": ("specviz.draft.data", "specviz.draft.vocab", "specviz.draft.evaluate",
                        "specviz.draft.train", "specviz.draft.cli"),
    "specviz.bench": ("specviz.benchmark.runner", "specviz.engine.prompts", "specviz.benchmark.cli"),
    "specviz.report": ("specviz.benchmark.report",),
}


class MovedModule(types.ModuleType):
    """Forwards attribute lookups to the modules an old name was split into."""

    def __init__(self, name: str, targets: tuple[str, ...]):
        super().__init__(name, f"moved: see {', '.join(targets)}")
        self.__path__ = []   # lets `specviz.decoders.sequoia` be imported below the old package name
        self._targets = targets

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        for target in self._targets:
            module = importlib.import_module(target)
            if hasattr(module, attr):
                return getattr(module, attr)
        raise AttributeError(f"{self.__name__}.{attr} moved in the regroup and is not in "
                             f"{', '.join(self._targets)}; see the README's Layout table")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        targets = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {' / '.join(targets)}", DeprecationWarning, stacklevel=3)
        return MovedModule(spec.name, targets)

    def exec_module(self, module):
        pass


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())

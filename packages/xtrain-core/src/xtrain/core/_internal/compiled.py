"""Accepting ``torch.compile(module)``: the Trainer needs the TrainModule itself (its steps, hooks and state), so a
compiled wrapper is unwrapped and its compilation moved onto the module, as ``module.compile(...)`` would do."""

from __future__ import annotations

from typing import Any

__all__ = ["unwrap_compiled"]


def unwrap_compiled(model: Any) -> Any:
    """The module inside a ``torch.compile`` wrapper, compiled in place with the wrapper's options; else ``model``.

    In place, calls such as ``self(x)`` inside ``training_step`` run compiled, parameter names keep no ``_orig_mod.``
    prefix (checkpoints stay portable), and strategies wrap the module as usual.
    """
    import sys

    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    optimized = getattr(eval_frame, "OptimizedModule", None)
    if optimized is None or not isinstance(model, optimized):
        return model
    inner = model._orig_mod
    inner._compiled_call_impl = model.dynamo_ctx(inner._call_impl)
    return inner

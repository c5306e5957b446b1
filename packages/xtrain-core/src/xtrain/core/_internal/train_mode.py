"""The warning for a fit that starts with modules in eval mode.

As Lightning since 2.2, the Trainer does not call ``module.train()`` when fitting starts: parts of a model kept in
eval mode on purpose (a frozen backbone's BatchNorm) stay so. A module left in eval mode by mistake (after
``predict`` or ``test``, or built by a library in eval mode, as ``from_pretrained`` does) then trains with dropout off
and frozen normalisation statistics, silently; the warning names those modules.
"""

from __future__ import annotations

from torch import nn

from xtrain.core.rank_zero import rank_zero_warn

__all__ = ["warn_eval_modules"]

_SHOWN = 5


def warn_eval_modules(module: nn.Module) -> None:
    """Warn (rank 0) when any submodule of ``module``, or ``module`` itself, is in eval mode as fitting starts."""
    named = list(module.named_modules())
    idle = [name or type(module).__name__ for name, sub in named if not sub.training]
    if not idle:
        return
    shown = ", ".join(idle[:_SHOWN]) + (f" and {len(idle) - _SHOWN} more" if len(idle) > _SHOWN else "")
    rank_zero_warn(f"fit starts with {len(idle)} of {len(named)} modules in eval mode ({shown}): training_step runs "
                   "them as they are (dropout off, BatchNorm statistics not updated), as Lightning does. If that is "
                   "not intended (the model was put in eval mode by your own code, or built in eval mode by a "
                   "library), call model.train() before fit; parts kept in eval mode on purpose need nothing.",
                   UserWarning, stacklevel=7)  # the line that called fit (in the process that did)

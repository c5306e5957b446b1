"""The process-wide torch settings that a spawned rank copies from its caller (a forked one inherits them).

``Trainer(deterministic=..., benchmark=...)`` and ``seed_everything`` set these in the calling process, before
``fit`` starts the ranks. A rank started by ``spawn`` is a fresh interpreter: without this copy it would train
without deterministic mode and from an unseeded random state, so two runs of the same script would differ, where
the same run under ``ddp_fork`` or ``ddp`` from a script repeats exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from xtrain.core._internal.rng import collect_rng_states, restore_rng_states

__all__ = ["GlobalState"]


@dataclass(frozen=True)
class GlobalState:
    """A snapshot of the caller's settings, taken when the ranks are started, applied in each rank first."""

    deterministic: bool
    warn_only: bool
    cudnn_benchmark: bool
    cudnn_deterministic: bool
    matmul_precision: str
    seed: int
    rng: dict[str, Any]

    @classmethod
    def capture(cls) -> GlobalState:
        """The caller's current settings and random states (NumPy's only where the caller imported NumPy).

        The accelerator's generators are seeded from the CPU one's seed, as ``torch.manual_seed`` does, also where
        the caller has initialized CUDA (then its states are captured, and left out here).
        """
        rng = {kind: state for kind, state in collect_rng_states().items() if kind != "cuda"}
        return cls(deterministic=torch.are_deterministic_algorithms_enabled(),
                   warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
                   cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
                   cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
                   matmul_precision=torch.get_float32_matmul_precision(),
                   seed=torch.initial_seed(), rng=rng)

    def apply(self) -> None:
        """Make this process's settings and random states the caller's."""
        torch.use_deterministic_algorithms(self.deterministic, warn_only=self.warn_only)
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        torch.backends.cudnn.deterministic = self.cudnn_deterministic
        torch.set_float32_matmul_precision(self.matmul_precision)
        restore_rng_states(self.rng)
        torch.cuda.manual_seed_all(self.seed)  # as torch.manual_seed does in the caller (lazily: CUDA stays untouched)

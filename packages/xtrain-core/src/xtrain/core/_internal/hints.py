"""Install hints for first-party names whose package is missing.

This table words the error for a missing package, and it reserves the names: a third-party distribution that
registers one of them is ignored (with one warning) even when the first-party package is not installed, so it can
never stand in for it. Resolution always goes through entry points. A test checks the table against the entry points
the first-party packages declare, so it cannot drift.
"""

from __future__ import annotations

__all__ = ["FIRST_PARTY", "install_hint"]

FIRST_PARTY = frozenset({"xtrain-core", "xtrain-strategies", "xtrain-precision", "xtrain-accelerators"})
"""The distributions of this repository (normalized names): their claim on a plugin name wins over a third party's."""

_ACCELERATORS = {"cuda": "", "gpu": "", "mps": "", "xpu": "", "xla": "[xla]", "tpu": "[xla]"}
# Only names a released package registers: the drift test in tests_integration/ compares this with the entry points.
_STRATEGIES = [
    "ddp", "ddp_spawn", "ddp_fork", "ddp_notebook", "ddp_find_unused_parameters_true",
    "ddp_spawn_find_unused_parameters_true", "ddp_fork_find_unused_parameters_true",
    "ddp_notebook_find_unused_parameters_true", "dp", "ddp2",
    "fsdp", "fsdp_cpu_offload", "model_parallel", "hsdp",
]
_XLA_STRATEGIES = ["single_xla", "xla", "xla_spmd"]
_PRECISIONS = ["64-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"]
_ENVIRONMENTS = ["torchelastic", "slurm", "lsf", "mpi", "kubeflow"]

_HINTS: dict[str, dict[str, str]] = {
    "xtrain.accelerators": {name: f"xtrain-accelerators{extra}" for name, extra in _ACCELERATORS.items()},
    "xtrain.strategies": dict.fromkeys(_STRATEGIES, "xtrain-strategies")
    | dict.fromkeys(_XLA_STRATEGIES, "xtrain-accelerators[xla]"),
    "xtrain.precision": dict.fromkeys(_PRECISIONS, "xtrain-precision"),
    "xtrain.environments": dict.fromkeys(_ENVIRONMENTS, "xtrain-strategies"),
    "xtrain.checkpoint_io": {"async": "xtrain-core"},
}

# Horovod, Bagua, and Bagua's algorithms on plain torch.distributed (their own extras are explained by the strategies).
_HINTS["xtrain.strategies"].update(dict.fromkeys(
    ["horovod", "bagua", "ddp_fp16_compress", "ddp_bf16_compress", "ddp_int8_compress", "local_sgd",
     "decentralized", "async_model_averaging"], "xtrain-strategies"))
_HINTS["xtrain.environments"].update({"horovod": "xtrain-strategies"})


def install_hint(group: str, name: str) -> str | None:
    """The ``pip install`` requirement that provides ``name`` in ``group``, if it is a first-party name."""
    return _HINTS.get(group, {}).get(name)


def first_party_names(group: str) -> dict[str, str]:
    """Every first-party name of ``group`` with its distribution (for the drift test)."""
    return dict(_HINTS.get(group, {}))

"""The launcher of the ``xla`` strategy: one worker process per XLA device through torch_xla's ``xmp.spawn``."""

from __future__ import annotations

import multiprocessing
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from typing_extensions import override

from xtrain.accelerators._internal.xla_runtime import import_xla, request_faithful_rounding, to_cpu
from xtrain.core.errors import ConfigError
from xtrain.core.launcher import Launcher

__all__ = ["XLALauncher"]


def _worker(index: int, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], out: str) -> None:
    result = fn(*args, **kwargs)
    if index == 0 and result is not None:
        torch.save(to_cpu(result), out)


class XLALauncher(Launcher):
    """Runs the Trainer in the worker processes torch_xla starts (one per TPU chip), and brings rank 0's state back.

    torch_xla decides the number of processes from the hardware (``xmp.spawn`` accepts ``nprocs`` of 1 or all
    devices only), so the strategy checks ``devices=`` against that before anything starts. With one device the
    function runs in this process, as ``xmp.spawn(nprocs=1)`` does. Workers are forked, which works from notebooks;
    torch_xla's runtime must not have been started in this process before (it refuses to spawn then).

    Args:
        nprocs: ``1`` to run in this process, ``None`` for one process per device of the host.
    """

    interactive_compatible: ClassVar[bool] = True
    runs_in_caller: ClassVar[bool] = False

    def __init__(self, *, nprocs: int | None) -> None:
        self.nprocs = nprocs

    @override
    def check(self) -> None:
        if self.nprocs != 1 and "fork" not in multiprocessing.get_all_start_methods():
            raise ConfigError("strategy", "xla", "starts its workers with fork, which this platform does not have.",
                              fix="use devices=1, or run on Linux (TPU hosts are Linux machines).")

    @override
    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if torch.are_deterministic_algorithms_enabled():
            request_faithful_rounding()  # the workers start their runtime before the accelerator is set up
        xmp = import_xla("torch_xla.distributed.xla_multiprocessing")
        with tempfile.TemporaryDirectory(prefix="xtrain-xla-") as tmp:
            out = Path(tmp) / "rank0.pt"
            xmp.spawn(_worker, args=(fn, args, kwargs, str(out)), nprocs=self.nprocs, start_method="fork")
            if not out.exists():
                return None
            # Written by our own worker a moment ago: rank 0's full state and outputs, not only tensors.
            return torch.load(out, weights_only=False)

    def __repr__(self) -> str:
        return f"XLALauncher(nprocs={self.nprocs})"

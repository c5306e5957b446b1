"""The thin layer over torch_xla that every XLA class here goes through.

Importing torch_xla costs about 4.5 s and, on TPU hosts, must not initialize the runtime in a process that later
spawns workers. So nothing imports it at module level: :func:`pjrt_device` and :func:`local_device_count` read the
environment (and ``find_spec``) only, and the functions that need torch_xla import it when called.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import torch

from xtrain.accelerators._internal.stats import has_module
from xtrain.core.errors import ConfigError

__all__ = ["FAITHFUL_ROUNDING", "import_xla", "local_device_count", "on_cpu", "pjrt_device", "request_faithful_rounding",
           "sync", "to_cpu"]

_INSTALL = "pip install 'xtrain-accelerators[xla]' torch==2.9.1 torch-xla==2.9.0"


def pjrt_device() -> str | None:
    """The PJRT device type torch_xla will use: ``PJRT_DEVICE`` if set, ``"TPU"`` where libtpu is installed.

    ``None`` means torch_xla would fall back to its CPU client with a warning; xtrain treats that as "no XLA
    hardware", so ``accelerator="auto"`` does not pick XLA on a machine that merely has torch_xla installed. Setting
    ``PJRT_DEVICE=CPU`` is how a user asks for XLA on the CPU.
    """
    if not has_module("torch_xla"):
        return None
    explicit = os.environ.get("PJRT_DEVICE", "").strip().upper()
    if explicit:
        return explicit.split("_")[0]
    return "TPU" if has_module("libtpu") else None


FAITHFUL_ROUNDING = "--xla_allow_excess_precision=false"


def request_faithful_rounding() -> bool:
    """Ask XLA to round every bfloat16/float16 intermediate as written, so results do not depend on graph cuts.

    By default XLA may keep intermediates in float32 and drop the conversions back ("excess precision"); what it
    drops depends on where a graph was cut, and a checkpoint or a ``.cpu()`` call cuts graphs. A resumed run then
    rounds differently from an uninterrupted one. The flag is read when the runtime starts, so it is added to
    ``XLA_FLAGS`` only before that; a user's own setting of it is left alone.

    Returns:
        Whether XLA will round faithfully (or the user chose the setting); ``False`` if the runtime already started.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_allow_excess_precision" in flags:
        return True
    if "torch_xla" in sys.modules and importlib.import_module("_XLAC")._xla_runtime_is_initialized():
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {FAITHFUL_ROUNDING}".strip()
    return True


def on_cpu() -> bool:
    """Whether XLA would run on its CPU client here, where cross-replica collectives abort (pytorch/xla#9089)."""
    return os.environ.get("PJRT_DEVICE", "").strip().upper().split("_")[0] == "CPU"


def local_device_count() -> int:
    """How many XLA devices this host has, without initializing the XLA runtime."""
    device = pjrt_device()
    if device is None:
        return 0
    if device == "CPU":
        return int(os.environ.get("CPU_NUM_DEVICES", "1") or "1")
    if device in ("CUDA", "GPU"):
        return int(os.environ.get("GPU_NUM_DEVICES", "0") or "0") or int(torch.cuda.device_count())
    if device == "TPU":
        tpu = import_xla("torch_xla._internal.tpu")
        return int(tpu.num_available_devices())
    return 0


def import_xla(module: str = "torch_xla") -> ModuleType:
    """Import ``module`` from torch_xla, or raise the ConfigError that says how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ConfigError("accelerator", "xla", f"needs torch_xla, which cannot be imported ({err}).",
                          fix=f"{_INSTALL} (torch-xla 2.9 works only with torch 2.9.x).") from err


def sync() -> None:
    """Run the graph traced since the last step boundary (``torch_xla.sync``, formerly ``xm.mark_step``)."""
    torch_xla = import_xla()
    torch_xla.sync()


def to_cpu(data: Any) -> Any:
    """A copy of ``data`` (a checkpoint: dicts, lists and tuples of tensors and plain values) with every XLA tensor
    moved to the CPU, so that it loads on machines without XLA and ``torch.save`` needs no XLA-specific pickling."""
    if isinstance(data, torch.Tensor):
        return data.detach().cpu() if data.device.type == "xla" else data
    if isinstance(data, Mapping):
        return type(data)({k: to_cpu(v) for k, v in data.items()})  # type: ignore[call-arg]
    if isinstance(data, (list, tuple)) and not hasattr(data, "_fields"):
        return type(data)(to_cpu(v) for v in data)
    return data

"""The Accelerator contract: everything device-specific, declared as data.

An accelerator never communicates between devices (that is the Strategy's job). It says which devices exist, how
``devices=`` is read, which collective backend and autocast device type belong to it, and which precisions its
hardware can run. The validator and the strategies read these declarations instead of guessing, so a third-party
accelerator with one device runs on its own device and its own backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch

from xtrain.core._internal.devices import DevicesArg, parse_device_indices

__all__ = ["Accelerator", "DevicesArg"]


class Accelerator(ABC):
    """Base class of every accelerator.

    Subclasses set the class attributes and implement the two abstract class methods, :meth:`is_available` and
    :meth:`device_count`. The defaults of the remaining methods (class methods :meth:`auto_device_count`,
    :meth:`parse_devices`, :meth:`unavailable_reason`; instance methods :meth:`get_device`, :meth:`setup_device`,
    :meth:`get_device_stats`, :meth:`teardown`) are right for most devices.

    Attributes:
        name: The registry name (``"cpu"``, ``"cuda"``).
        device_type: The torch device type of its devices (``"cpu"``, ``"cuda"``, ``"xla"``).
        dist_backend: The ``torch.distributed`` backend for collectives between its devices, or ``None`` when
            multi-process strategies cannot run on it.
        autocast_device_type: The ``device_type`` handed to ``torch.autocast`` by mixed precision.
        supported_precisions: The precision names its hardware can run; ``None`` means any.
        supported_strategies: The strategy names it can run under; ``None`` means any that accept it.
        auto_priority: Rank for ``accelerator="auto"``; the available accelerator with the highest value wins. The
            built-ins: ``cpu`` 0, ``xpu`` 20, ``cuda`` and ``mps`` 30, ``xla`` 40. Pick a value below 0 for a device
            that should never be chosen automatically over the CPU.
        default_strategy: The strategy ``strategy="auto"`` picks for one device.
        default_parallel_strategy: The strategy ``strategy="auto"`` picks for several devices or nodes.
        interactive_parallel_strategy: The one it picks for several devices of one node in a notebook or REPL,
            where a strategy that re-runs the script cannot start (``None``: ``default_parallel_strategy`` there too).
        device_index_limit: Whether ``devices=N`` must not exceed :meth:`device_count` (False for CPU processes).
        supports_inference_mode: Whether evaluation may run under ``torch.inference_mode`` (XLA's lazy tensors
            cannot be inference tensors, so evaluation there uses ``torch.no_grad`` whatever the Trainer says).
    """

    name: ClassVar[str]
    device_type: ClassVar[str]
    dist_backend: ClassVar[str | None] = "gloo"
    autocast_device_type: ClassVar[str] = "cpu"
    supported_precisions: ClassVar[frozenset[str] | None] = None
    supported_strategies: ClassVar[frozenset[str] | None] = None
    auto_priority: ClassVar[int] = 0
    default_strategy: ClassVar[str] = "single_device"
    default_parallel_strategy: ClassVar[str] = "ddp"
    interactive_parallel_strategy: ClassVar[str | None] = "ddp_notebook"
    device_index_limit: ClassVar[bool] = True
    supports_inference_mode: ClassVar[bool] = True

    @classmethod
    @abstractmethod
    def is_available(cls) -> bool:
        """Whether the hardware and its library are usable in this process. Must be cheap and import nothing heavy."""

    @classmethod
    @abstractmethod
    def device_count(cls) -> int:
        """How many devices this machine has (0 when unavailable)."""

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why :meth:`is_available` is ``False`` here, and how to change that; ``None`` when there is nothing to say.

        Optional. The validator puts it in the error a user gets for asking for this accelerator by name where it is
        unavailable, e.g. ``"torch 2.4.0+cpu was built without CUDA; install a CUDA build of torch"`` or
        ``"ACME_NPU_VISIBLE_DEVICES is not set; export it to the NPUs this process may use"``. Must be cheap, like
        :meth:`is_available`.
        """
        return None

    @classmethod
    def auto_device_count(cls) -> int:
        """The number of devices ``devices="auto"`` means: all of them by default."""
        return max(cls.device_count(), 1)

    @classmethod
    def parse_devices(cls, devices: DevicesArg) -> list[int]:
        """Turn the user's ``devices=`` into device indices, or raise :class:`~xtrain.core.errors.ConfigError`.

        The rule is the same for every accelerator (see :func:`xtrain.core._internal.devices.parse_device_indices`),
        so ``devices`` never means one thing on CPU and another on GPU.
        """
        return parse_device_indices(
            devices,
            available=cls.device_count(),
            auto_count=cls.auto_device_count(),
            accelerator=cls.name,
            limit_to_available=cls.device_index_limit,
        )

    def get_device(self, index: int) -> torch.device:
        """The torch device for a device index."""
        return torch.device(self.device_type, index)

    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` current for this process (e.g. ``torch.cuda.set_device``)."""

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """Numbers for monitoring: memory used and free, utilisation where the library reports it."""
        return {}

    def peak_flops(self, device: torch.device, dtype: torch.dtype) -> float | None:
        """The device's peak FLOP/s for matrix math in ``dtype``, when known (``ThroughputMonitor`` reports MFU
        against it); ``None`` when the accelerator does not know its hardware's figure."""
        return None

    def teardown(self) -> None:
        """Release what :meth:`setup_device` acquired."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

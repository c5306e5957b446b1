"""DDP with a compressed gradient all-reduce: Bagua's ``gradient_allreduce`` with compression and ``bytegrad``.

Bagua only runs on CUDA with NCCL. These are the same ideas on plain ``torch.distributed`` communication hooks, so
they work on every backend, CPU/gloo included:

* ``ddp_fp16_compress`` / ``ddp_bf16_compress``: gradients travel as float16 / bfloat16 (half the bytes). float16
  keeps more mantissa, bfloat16 float32's range; both average in the reduced precision.
* ``ddp_int8_compress``: ByteGrad, 8-bit min-max quantization per chunk with a two-phase scatter-reduce, about a
  quarter of float32's bytes at any world size (see :mod:`xtrain.strategies._internal.comm_hooks`).

Everything else is DDP: launching, ``no_sync`` accumulation, checkpoints. Under manual optimization gradients are
averaged uncompressed (DDP's hooks do not see ``manual_backward``). ``strategy.communication`` counts the bytes each
rank handed to the gradient collectives (``tools/bench/compression.py`` measures the wire as well).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.strategies._internal.comm_hooks import CommStats, HookState, bf16_hook, fp16_hook, int8_hook
from xtrain.strategies.ddp import DDPStrategy

__all__ = ["CompressedDDPStrategy", "DDPBf16CompressStrategy", "DDPFp16CompressStrategy", "DDPInt8CompressStrategy",
           "GradientCompression"]

GradientCompression = Literal["fp16", "bf16", "int8"]


class CompressedDDPStrategy(DDPStrategy):
    """DDP whose gradient buckets are compressed by a communication hook.

    Args:
        compression: ``"fp16"``, ``"bf16"`` or ``"int8"`` (ByteGrad).
        chunk_size: Values per quantization chunk for ``"int8"`` (each chunk sends 8 bytes of range besides its
            codes; smaller chunks are more precise). Every parameter starts a new chunk, so each parameter pads at
            most ``chunk_size - 1`` values: negligible for real models, visible on tiny ones.
        **kwargs: DDP's options (``start_method``, ``bucket_cap_mb``, ...) except ``comm_hook``, which this sets.
    """

    name: ClassVar[str] = "ddp_compressed"

    def __init__(self, *, compression: GradientCompression = "fp16", chunk_size: int = 256, **kwargs: Any) -> None:
        if kwargs.get("comm_hook") is not None:
            raise ConfigError("comm_hook", kwargs["comm_hook"], f"is set by {type(self).__name__} itself.",
                              fix="use strategy='ddp' with your comm_hook, or drop comm_hook.")
        if compression not in ("fp16", "bf16", "int8"):
            raise ConfigError("compression", compression, "is not a gradient compression.",
                              choices=["fp16", "bf16", "int8"], fix="write compression='fp16'.")
        if chunk_size < 1:
            raise ConfigError("chunk_size", chunk_size, "must be a positive number of values.", fix="write 256.")
        super().__init__(**kwargs)
        self.compression: GradientCompression = compression
        self.communication = CommStats()
        self.comm_hook_state = HookState(stats=self.communication, chunk_size=chunk_size)
        self.comm_hook = {"fp16": fp16_hook, "bf16": bf16_hook, "int8": int8_hook}[compression]

    @override
    def __repr__(self) -> str:
        return f"{type(self).__name__}(compression={self.compression!r}, start_method={self.start_method!r})"


class DDPFp16CompressStrategy(CompressedDDPStrategy):
    """DDP with gradients all-reduced in float16 (half the bytes)."""

    name: ClassVar[str] = "ddp_fp16_compress"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(compression="fp16", **kwargs)


class DDPBf16CompressStrategy(CompressedDDPStrategy):
    """DDP with gradients all-reduced in bfloat16 (half the bytes, float32's range)."""

    name: ClassVar[str] = "ddp_bf16_compress"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(compression="bf16", **kwargs)


class DDPInt8CompressStrategy(CompressedDDPStrategy):
    """DDP with ByteGrad: gradients quantized to 8 bits in a two-phase all-reduce (about a quarter of the bytes)."""

    name: ClassVar[str] = "ddp_int8_compress"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(compression="int8", **kwargs)

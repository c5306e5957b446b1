"""TEST DOUBLE of ``bagua.torch_api.algorithms.base``: an algorithm remembers the options it was built with."""

from typing import Any

from bagua.torch_api._record import record


class Algorithm:
    def __init__(self, **options: Any) -> None:
        self.options = options
        record("Algorithm", cls=type(self).__name__,
               options={k: v if isinstance(v, (int, float, str, bool)) else type(v).__name__
                        for k, v in options.items()})


class AlgorithmImpl:
    """What ``with_bagua``/``DistributedDataParallel`` exposes as ``bagua_algorithm``; async adds abort/resume."""

    def __init__(self, algorithm: Algorithm) -> None:
        self.algorithm = algorithm

    def abort(self, bagua_ddp: Any) -> None:
        record("abort", has_inner=hasattr(bagua_ddp, "inner"))

    def resume(self, bagua_ddp: Any) -> None:
        record("resume", has_inner=hasattr(bagua_ddp, "inner"))

"""TEST ONLY: ``BaguaStrategy`` allowed on the CPU, to run its glue against the Bagua test double on gloo.

Real Bagua is CUDA only, so :class:`~xtrain.strategies.bagua.BaguaStrategy` declares ``cuda``; nothing else differs.
"""

from typing import ClassVar

from xtrain.strategies.bagua import BaguaStrategy


class BaguaStrategyOnCPUForTest(BaguaStrategy):
    supported_accelerators: ClassVar[frozenset[str] | None] = None

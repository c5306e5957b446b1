"""TEST DOUBLE of ``bagua.torch_api.algorithms.gradient_allreduce`` (Bagua 0.9 signature); records its options only."""

from bagua.torch_api.algorithms.base import Algorithm


class GradientAllReduceAlgorithm(Algorithm):
    def __init__(self, hierarchical: bool = False, average: bool = True) -> None:
        super().__init__(hierarchical=hierarchical, average=average)

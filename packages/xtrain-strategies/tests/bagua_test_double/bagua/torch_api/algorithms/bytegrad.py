"""TEST DOUBLE of ``bagua.torch_api.algorithms.bytegrad`` (Bagua 0.9 signature); records its options only."""

from bagua.torch_api.algorithms.base import Algorithm


class ByteGradAlgorithm(Algorithm):
    def __init__(self, hierarchical: bool = True, average: bool = True) -> None:
        super().__init__(hierarchical=hierarchical, average=average)

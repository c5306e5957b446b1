"""TEST DOUBLE of ``bagua.torch_api.algorithms.decentralized`` (Bagua 0.9 signatures); records options only."""

from bagua.torch_api.algorithms.base import Algorithm


class DecentralizedAlgorithm(Algorithm):
    def __init__(self, hierarchical: bool = True, peer_selection_mode: str = "all",
                 communication_interval: int = 1) -> None:
        super().__init__(hierarchical=hierarchical, peer_selection_mode=peer_selection_mode,
                         communication_interval=communication_interval)


class LowPrecisionDecentralizedAlgorithm(Algorithm):
    def __init__(self, hierarchical: bool = True, communication_interval: int = 1) -> None:
        super().__init__(hierarchical=hierarchical, communication_interval=communication_interval)

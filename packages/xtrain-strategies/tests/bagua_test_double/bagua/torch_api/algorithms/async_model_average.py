"""TEST DOUBLE of ``bagua.torch_api.algorithms.async_model_average`` (Bagua 0.9 signature); records its options only."""

from bagua.torch_api.algorithms.base import Algorithm


class AsyncModelAverageAlgorithm(Algorithm):
    def __init__(self, peer_selection_mode: str = 'all', sync_interval_ms: int = 500, warmup_steps: int = 0) -> None:
        super().__init__(peer_selection_mode=peer_selection_mode, sync_interval_ms=sync_interval_ms, warmup_steps=warmup_steps)

"""TEST DOUBLE of ``bagua.torch_api.algorithms``: the registry and the algorithm classes record their options."""

from typing import Any

from bagua.torch_api._record import record
from bagua.torch_api.algorithms import async_model_average, bytegrad, decentralized, gradient_allreduce, q_adam


class _AlgorithmRegistry(dict[str, Any]):
    def get(self, name: str) -> Any:  # type: ignore[override]
        record("GlobalAlgorithmRegistry.get", name=name)
        return self[name]


GlobalAlgorithmRegistry = _AlgorithmRegistry(
    gradient_allreduce=gradient_allreduce.GradientAllReduceAlgorithm, bytegrad=bytegrad.ByteGradAlgorithm,
    decentralized=decentralized.DecentralizedAlgorithm,
    low_precision_decentralized=decentralized.LowPrecisionDecentralizedAlgorithm, qadam=q_adam.QAdamAlgorithm,
    **{"async": async_model_average.AsyncModelAverageAlgorithm})

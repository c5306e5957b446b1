"""``strategy="bagua"``: the error without Bagua, and the glue, checked against a TEST DOUBLE of ``bagua.torch_api``.

Real Bagua cannot run here (CUDA + NCCL only, wheels stop at Python 3.10, unmaintained): the double in
``bagua_test_double/`` imitates the Bagua 0.9 calls the strategy makes, on gloo, and records them. These tests prove
the glue calls Bagua's API as its sources describe; they prove nothing about Bagua itself.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from strategies_helpers import Run, assert_close
from xtrain.core import ConfigError, Trainer

DOUBLE = Path(__file__).parent / "bagua_test_double"
SETTINGS: dict[str, Any] = {"devices": 2, "max_steps": 6, "batch_size": 8}


def _trainer(**kwargs: Any) -> Trainer:
    return Trainer(logger=False, enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
                   **kwargs)


@pytest.fixture
def bagua_double(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test double importable as ``bagua`` in this process."""
    monkeypatch.syspath_prepend(str(DOUBLE))
    for name in [m for m in sys.modules if m == "bagua" or m.startswith("bagua.")]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [m for m in sys.modules if m == "bagua" or m.startswith("bagua.") or m == "bagua_on_cpu"]:
        del sys.modules[name]


def test_without_bagua_the_error_says_what_it_needs_and_what_to_use_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bagua", None)
    with pytest.raises(ConfigError) as info:
        _trainer(strategy="bagua", devices=2)
    message = str(info.value)
    assert message.startswith("strategy='bagua': needs Bagua (bagua.torch_api), which is not installed")
    assert "NVIDIA GPUs with NCCL" in message and "Python 3.10" in message and "unmaintained" in message
    for instead in ("ddp_fp16_compress", "ddp_int8_compress", "local_sgd", "decentralized", "async_model_averaging"):
        assert f"'{instead}'" in message
    from xtrain.strategies.bagua import BaguaStrategy

    with pytest.raises(ConfigError, match=r"for 'async', strategy='async_model_averaging'"):
        BaguaStrategy(algorithm="async")


@pytest.mark.usefixtures("bagua_double")
def test_options_go_to_the_strategy_or_the_algorithm_and_cuda_is_required() -> None:
    from xtrain.strategies.bagua import BaguaStrategy

    strategy = BaguaStrategy(algorithm="decentralized", peer_selection_mode="shift_one", heartbeat_timeout=3.0)
    assert strategy.algorithm_options == {"peer_selection_mode": "shift_one"} and strategy.heartbeat_timeout == 3.0
    with pytest.raises(ConfigError, match=r"^algorithm='zero': is not a Bagua algorithm. Valid choices: 'async', "):
        BaguaStrategy(algorithm="zero")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^accelerator='cpu': cannot run strategy='bagua'. Valid choices: 'cuda'"):
        _trainer(strategy=BaguaStrategy(), accelerator="cpu", devices=2)


@pytest.mark.usefixtures("bagua_double")
def test_qadam_needs_a_qadam_optimizer_and_receives_it() -> None:
    from bagua.torch_api.algorithms.q_adam import QAdamOptimizer

    from xtrain.strategies.bagua import BaguaStrategy

    strategy = BaguaStrategy(algorithm="qadam", hierarchical=False)
    params = [torch.nn.Parameter(torch.zeros(2))]
    with pytest.raises(ConfigError, match="qadam algorithm needs exactly one QAdamOptimizer"):
        strategy._make_algorithm([torch.optim.SGD(params, lr=0.1)])
    optimizer = QAdamOptimizer(params, lr=0.1, warmup_steps=10)
    algorithm = strategy._make_algorithm([optimizer])
    assert type(algorithm).__name__ == "QAdamAlgorithm"
    assert algorithm.options == {"q_adam_optimizer": optimizer, "hierarchical": False}


def _calls(run: Run, rank: int) -> list[dict[str, Any]]:
    return json.loads((run.out / f"calls.rank{rank}.json").read_text())  # type: ignore[no-any-return]


def _double_run(train: Callable[..., Run], tmp_path: Path, options: dict[str, Any], **extra: Any) -> Run:
    log = tmp_path / f"calls-{len(list(tmp_path.iterdir()))}"
    run = train({**SETTINGS, "strategy_class": "bagua_on_cpu:BaguaStrategyOnCPUForTest", "strategy_options": options,
                 **extra}, extra_env={"PYTHONPATH": str(DOUBLE), "BAGUA_TEST_DOUBLE_LOG": str(log)})
    for rank in (0, 1):
        (run.out / f"calls.rank{rank}.json").write_text(Path(f"{log}.rank{rank}.json").read_text())
    return run


def test_glue_trains_two_ranks_against_the_test_double(train: Callable[..., Run], tmp_path: Path) -> None:
    """gradient_allreduce on the double (which is torch DDP underneath) must train exactly as ``ddp`` does."""
    run = _double_run(train, tmp_path, {"algorithm": "gradient_allreduce", "hierarchical": True, "flatten": False})
    reference = train({**SETTINGS, "strategy": "ddp"})
    for rank in (0, 1):
        assert_close(run.params(rank), reference.params(0), tol=1e-6)
        calls = _calls(run, rank)
        assert [c["call"] for c in calls] == ["init_process_group", "GlobalAlgorithmRegistry.get", "Algorithm",
                                              "DistributedDataParallel"]
        assert calls[0] == {"call": "init_process_group", "missing_variables": [], "torch_initialized_before": False}
        assert calls[2]["options"] == {"hierarchical": True, "average": True}
        assert calls[3] == {"call": "DistributedDataParallel", "module": "StepRedirect", "optimizers": ["SGD"],
                            "algorithm": "GradientAllReduceAlgorithm", "gradient_as_bucket_view": False}
    assert run.records[0]["state_keys"] == ["net.0.bias", "net.0.weight", "net.3.bias", "net.3.weight"]


def test_async_is_aborted_at_teardown_and_resumed_by_the_next_fit(train: Callable[..., Run], tmp_path: Path) -> None:
    run = _double_run(train, tmp_path, {"algorithm": "async", "sync_interval_ms": 50}, second_fit=True)
    for rank in (0, 1):
        calls = [c["call"] for c in _calls(run, rank)]
        # The second fit configures new optimizers (as Lightning), so the resumed wrapper is stopped and replaced.
        assert calls[-7:] == ["abort", "resume", "abort", "GlobalAlgorithmRegistry.get", "Algorithm",
                              "DistributedDataParallel", "abort"], calls
        assert calls.count("init_process_group") == 1

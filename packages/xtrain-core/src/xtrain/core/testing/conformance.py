"""The conformance kit: pytest base classes that prove a plugin honours its contract.

Subclass the class for your plugin kind in your own test suite and set the class attributes; every test method
then runs against your plugin::

    from xtrain.core.testing import StrategyConformance

    class TestMyStrategy(StrategyConformance):
        strategy = "my_strategy"
        devices = 2

Tests that need hardware you do not have skip with the reason. Multi-process strategies are checked by running the
tiny model in real processes (see :mod:`xtrain.core.testing.processes`), never with fake process groups.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from xtrain.core._internal.resolve import resolve
from xtrain.core.accelerator import Accelerator
from xtrain.core.checkpoint_io import CheckpointIO
from xtrain.core.errors import CheckpointError, ConfigError
from xtrain.core.precision import Precision
from xtrain.core.registry import ACCELERATORS, CHECKPOINT_IO, PRECISIONS, STRATEGIES
from xtrain.core.strategy import Strategy
from xtrain.core.testing.doubles import simulate_devices
from xtrain.core.testing.processes import python_command, run_processes, torchrun_command

__all__ = ["AcceleratorConformance", "CheckpointIOConformance", "PrecisionConformance", "StrategyConformance",
           "run_probe"]


def run_probe(tmp_path: Path, settings: dict[str, Any], *, launch: str = "script", nprocs: int = 1,
              timeout: float = 120.0) -> list[dict[str, Any]]:
    """Train the tiny model with Trainer ``settings`` in real processes; returns every rank's probe record."""
    args = ["-m", "xtrain.core.testing._probe", json.dumps(settings), str(tmp_path)]
    if launch == "torchrun":
        command = torchrun_command(*args, nproc_per_node=nprocs)
    else:
        command = python_command(*args)
    result = run_processes([command], timeout=timeout, cwd=tmp_path)
    result.check()
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert records, f"no rank wrote a probe record:\n{result.output}"
    return sorted(records, key=lambda r: r["rank"])


class AcceleratorConformance:
    """Checks an Accelerator: declared data, registration, ``devices=`` rules, and a real step when available.

    The ``devices=`` rules, auto-selection and the strategy's device are checked with the device count simulated
    (:func:`~xtrain.core.testing.simulate_devices`), so they run on any machine; the rest needs the hardware and
    skips without it.

    Attributes:
        accelerator: The class under test.
        registered_name: The entry-point name to resolve it by, when it differs from ``accelerator.name``.
        simulated_device_count: How many devices the simulated checks pretend there are (at least 2).
    """

    accelerator: ClassVar[type[Accelerator]]
    registered_name: ClassVar[str | None] = None
    simulated_device_count: ClassVar[int] = 4

    @property
    def _name(self) -> str:
        return self.registered_name or self.accelerator.name

    def _available(self) -> None:
        if not self.accelerator.is_available():
            pytest.skip(f"accelerator {self.accelerator.name!r} is not available on this machine")

    def test_declares_capabilities_as_data(self) -> None:
        acc = self.accelerator
        assert isinstance(acc.name, str) and acc.name
        assert isinstance(acc.device_type, str) and acc.device_type
        assert acc.dist_backend is None or isinstance(acc.dist_backend, str)
        assert isinstance(acc.autocast_device_type, str)
        assert isinstance(acc.auto_priority, int) and not isinstance(acc.auto_priority, bool)
        assert isinstance(acc.device_index_limit, bool) and isinstance(acc.supports_inference_mode, bool)
        assert isinstance(acc.default_strategy, str) and isinstance(acc.default_parallel_strategy, str)
        for names in (acc.supported_precisions, acc.supported_strategies):
            assert names is None or (isinstance(names, frozenset) and all(isinstance(n, str) for n in names))

    def test_is_registered_by_name(self) -> None:
        name = self._name
        assert name in ACCELERATORS, f"{name!r} is not in the xtrain.accelerators entry points"
        loaded = ACCELERATORS.load(name)
        assert loaded is self.accelerator or isinstance(loaded(), self.accelerator)

    def test_availability_and_count_are_consistent(self) -> None:
        available, count = self.accelerator.is_available(), self.accelerator.device_count()
        assert isinstance(available, bool) and isinstance(count, int) and count >= 0
        assert not available or count >= 1

    @pytest.mark.parametrize("bad", [0, [], True, 1.5, "2", [0, 0], -2, "x"])
    def test_rejects_ambiguous_or_invalid_devices(self, bad: Any) -> None:
        with pytest.raises(ConfigError, match="devices="):
            self.accelerator.parse_devices(bad)

    def test_parses_every_spelling_with_simulated_devices(self) -> None:
        n = self.simulated_device_count
        every = list(range(n))
        accepted: list[tuple[Any, list[int]]] = [
            (1, [0]), (n, every), (-1, every), ("-1", every), ([n - 1], [n - 1]), ((0, n - 1), [0, n - 1]),
            (",".join(map(str, every)), every), (f"{n - 1},", [n - 1]), (f" 0 , {n - 1} ", [0, n - 1]),
        ]
        with simulate_devices(self.accelerator, n) as acc:
            for devices, expected in accepted:
                assert acc.parse_devices(devices) == expected, f"devices={devices!r}"
            assert acc.parse_devices("auto") == list(range(acc.auto_device_count()))
            rejected: list[Any] = [0, [], True, 1.5, "2", [0, 0], -2, [-1], ["0"], "a,b"]
            if acc.device_index_limit:
                rejected += [n + 1, [n], f"0,{n}"]
            for devices in rejected:
                with pytest.raises(ConfigError, match="devices=") as info:
                    acc.parse_devices(devices)
                assert "Fix:" in str(info.value), f"devices={devices!r}: the message gives no fix"

    def test_strategy_device_comes_from_the_accelerator(self) -> None:
        """Lightning #18902: the strategy must run on the accelerator's device, never fall back to the CPU."""
        n = self.simulated_device_count
        with simulate_devices(self.accelerator, n) as acc:
            chosen = resolve(accelerator=self._name, devices=[n - 1], strategy=acc.default_strategy).strategy
            assert type(chosen.accelerator) is acc
            assert chosen.root_device == acc().get_device(n - 1)
            assert chosen.root_device.type == acc.device_type
            automatic = resolve(accelerator=self._name, devices=1).strategy
            assert automatic.root_device == acc().get_device(0)

    def test_unavailable_is_refused_listing_what_is_available(self) -> None:
        with simulate_devices(self.accelerator, 0), pytest.raises(ConfigError) as info:
            resolve(accelerator=self._name)
        message = str(info.value)
        assert message.startswith(f"accelerator={self._name!r}:") and "is not available" in message
        assert "Fix:" in message

    def test_auto_selection_follows_the_declared_priority(self) -> None:
        with simulate_devices(self.accelerator, self.simulated_device_count) as acc:
            chosen = resolve(accelerator="auto", devices=1).strategy.accelerator
            assert chosen.is_available()
            assert (chosen.auto_priority, chosen.name) >= (acc.auto_priority, acc.name), (
                f"auto chose {chosen.name!r} (priority {chosen.auto_priority}) over the available {acc.name!r} "
                f"(priority {acc.auto_priority})")

    def test_parses_one_device(self) -> None:
        self._available()
        assert self.accelerator.parse_devices(1) == [0]
        assert self.accelerator().get_device(0).type == self.accelerator.device_type

    def test_device_stats_are_numbers(self) -> None:
        self._available()
        stats = self.accelerator().get_device_stats(self.accelerator().get_device(0))
        assert all(isinstance(k, str) and isinstance(v, (int, float)) for k, v in stats.items())

    def test_trains_on_its_own_device(self, tmp_path: Path) -> None:
        self._available()
        records = run_probe(tmp_path, {"accelerator": self._name, "devices": 1})
        assert records[0]["device_type"] == self.accelerator.device_type
        assert records[0]["losses"][-1] < records[0]["losses"][0]


class StrategyConformance:
    """Checks a Strategy: declared data, registration, and real training with collectives on ``devices`` ranks."""

    strategy: ClassVar[str]
    accelerator: ClassVar[str] = "cpu"
    devices: ClassVar[int] = 1
    precision: ClassVar[str] = "32-true"
    launch: ClassVar[str] = "script"
    timeout: ClassVar[float] = 180.0

    def _make(self) -> Strategy:
        created = STRATEGIES.create(self.strategy)
        assert isinstance(created, Strategy)
        return created

    def test_declares_capabilities_as_data(self) -> None:
        s = self._make()
        assert isinstance(s.name, str)
        for names in (s.supported_accelerators, s.supported_precisions):
            assert names is None or (isinstance(names, frozenset) and all(isinstance(n, str) for n in names))
        assert s.checkpoint_layout in ("full", "sharded")
        assert s.max_devices is None or s.max_devices >= 1

    def test_is_registered_by_name(self) -> None:
        assert self.strategy in STRATEGIES

    def test_trains_and_collectives_agree(self, tmp_path: Path) -> None:
        if not ACCELERATORS.load(self.accelerator).is_available():  # type: ignore[attr-defined]
            pytest.skip(f"accelerator {self.accelerator!r} is not available here")
        settings = {"strategy": self.strategy, "accelerator": self.accelerator, "devices": self.devices,
                    "precision": self.precision}
        records = run_probe(tmp_path, settings, launch=self.launch, nprocs=self.devices, timeout=self.timeout)
        world = records[0]["world_size"]
        assert len(records) == world, f"expected a record from each of {world} ranks, got {len(records)}"
        assert [r["rank"] for r in records] == list(range(world))
        expected_sum = world * (world + 1) / 2
        for r in records:
            assert r["losses"][-1] < r["losses"][0], "loss did not decrease"
            assert r["reduce_sum"] == expected_sum
            assert r["reduce_mean"] == expected_sum / world
            assert r["reduce_max"] == world
            assert r["all_gather"] == [float(i + 1) for i in range(world)]
            assert r["broadcast"] == 0
            assert r["any_rank_zero"] is True
            assert r["all_rank_zero"] is (world == 1)
            assert abs(r["param_sum"] - records[0]["param_sum"]) <= 1e-6 * max(1.0, abs(records[0]["param_sum"]))
        zero = records[0]
        if zero["checkpoint_keys"]:
            assert zero["checkpoint_params_equal"]
            assert zero["checkpoint_manifest"]["world_size"] == world
            assert zero["checkpoint_manifest"]["strategy"] == self._make().name


class PrecisionConformance:
    """Checks a Precision: declared data, registration, dtypes inside the step, a decreasing loss, state round trip."""

    precision: ClassVar[str]
    accelerator: ClassVar[str] = "cpu"
    expected_param_dtype: ClassVar[torch.dtype] = torch.float32
    expected_activation_dtype: ClassVar[torch.dtype] = torch.float32

    def _make(self) -> Precision:
        created = PRECISIONS.create(self.precision)
        assert isinstance(created, Precision)
        return created

    def test_declares_capabilities_as_data(self) -> None:
        p = self._make()
        assert p.name == self.precision
        assert p.param_dtype is None or isinstance(p.param_dtype, torch.dtype)
        assert isinstance(p.has_forward_context, bool) and isinstance(p.converts_input, bool)

    def test_is_registered_by_name(self) -> None:
        assert self.precision in PRECISIONS

    def test_module_dtype_matches_param_dtype(self) -> None:
        """``param_dtype`` is what ``convert_module`` and ``module_init_context`` produce (float32 when ``None``).

        A plugin that replaces layers (quantized weights) overrides this test with its own expectation.
        """
        p = self._make()
        expected = p.param_dtype or torch.float32
        assert expected == self.expected_param_dtype
        converted = p.convert_module(torch.nn.Linear(2, 2))
        assert {t.dtype for t in converted.parameters()} == {expected}
        with p.module_init_context():
            created = torch.nn.Linear(2, 2)
        assert {t.dtype for t in created.parameters()} == {expected}
        assert torch.get_default_dtype() == torch.float32, "module_init_context did not restore the default dtype"

    def test_converts_input_is_truthful(self) -> None:
        """Hot paths skip ``convert_input`` when ``converts_input`` is ``False``, so it must then be the identity."""
        p = self._make()
        batch = (torch.randn(2, 3), torch.tensor([0, 1]))
        converted = p.convert_input(batch)
        if not p.converts_input:
            assert converted is batch or all(a is b for a, b in zip(converted, batch, strict=True))
        else:
            assert converted[1].dtype == torch.int64, "convert_input must leave integer tensors (labels) alone"

    def test_state_dict_round_trips(self) -> None:
        p = self._make()
        p.connect(device_type="cpu")
        state = p.state_dict()
        q = self._make()
        q.connect(device_type="cpu")
        q.load_state_dict(state)
        assert q.state_dict().keys() == state.keys()

    def test_trains_with_expected_dtypes(self, tmp_path: Path) -> None:
        if not ACCELERATORS.load(self.accelerator).is_available():  # type: ignore[attr-defined]
            pytest.skip(f"accelerator {self.accelerator!r} is not available here")
        records = run_probe(tmp_path, {"precision": self.precision, "accelerator": self.accelerator, "devices": 1,
                                       "max_steps": 16})
        r = records[0]
        assert r["losses"][-1] < r["losses"][0], f"loss did not decrease: {r['losses']}"
        assert r["param_dtypes"] == [str(self.expected_param_dtype)]
        assert r["activation_dtypes"] == [str(self.expected_activation_dtype)]


class CheckpointIOConformance:
    """Checks a CheckpointIO: round trip, overwrite, remove, and clear errors for missing or corrupted files."""

    checkpoint_io: ClassVar[str]

    def _make(self) -> CheckpointIO:
        created = CHECKPOINT_IO.create(self.checkpoint_io)
        assert isinstance(created, CheckpointIO)
        return created

    def _sample(self, value: float) -> dict[str, Any]:
        return {"state_dict": {"w": torch.full((4, 4), value)}, "meta": {"step": int(value), "name": "x"},
                "list": [1, 2.5, "three"]}

    def test_is_registered_by_name(self) -> None:
        assert self.checkpoint_io in CHECKPOINT_IO

    def test_round_trip_and_overwrite(self, tmp_path: Path) -> None:
        io = self._make()
        path = tmp_path / "a.ckpt"
        io.save_checkpoint(self._sample(1.0), path)
        io.save_checkpoint(self._sample(2.0), path)
        io.wait()
        loaded = io.load_checkpoint(path)
        assert torch.equal(loaded["state_dict"]["w"], torch.full((4, 4), 2.0))
        assert loaded["meta"] == {"step": 2, "name": "x"} and loaded["list"] == [1, 2.5, "three"]
        assert not [p for p in os.listdir(tmp_path) if p != "a.ckpt"], "temporary files were left behind"

    def test_copy_is_independent_of_later_saves(self, tmp_path: Path) -> None:
        io = self._make()
        io.save_checkpoint(self._sample(1.0), tmp_path / "a.ckpt")
        io.copy_checkpoint(tmp_path / "a.ckpt", tmp_path / "last.ckpt")
        io.save_checkpoint(self._sample(2.0), tmp_path / "a.ckpt")
        io.wait()
        assert torch.equal(io.load_checkpoint(tmp_path / "last.ckpt")["state_dict"]["w"], torch.full((4, 4), 1.0))
        assert torch.equal(io.load_checkpoint(tmp_path / "a.ckpt")["state_dict"]["w"], torch.full((4, 4), 2.0))
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ckpt", "last.ckpt"]

    def test_remove(self, tmp_path: Path) -> None:
        io = self._make()
        path = tmp_path / "a.ckpt"
        io.save_checkpoint(self._sample(1.0), path)
        io.wait()
        io.remove_checkpoint(path)
        assert not path.exists()

    def test_missing_file_is_a_clear_error(self, tmp_path: Path) -> None:
        with pytest.raises(CheckpointError, match="does not exist"):
            self._make().load_checkpoint(tmp_path / "nope.ckpt")

    def test_truncated_file_is_a_clear_error(self, tmp_path: Path) -> None:
        io = self._make()
        path = tmp_path / "a.ckpt"
        io.save_checkpoint(self._sample(1.0), path)
        io.wait()
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        with pytest.raises(CheckpointError, match="truncated or corrupted") as info:
            io.load_checkpoint(path)
        assert str(path) in str(info.value)

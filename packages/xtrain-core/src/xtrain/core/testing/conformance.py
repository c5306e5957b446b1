"""The conformance kit: pytest base classes that prove a plugin honours its contract.

Subclass the class for your plugin kind in your own test suite and set the class attributes; every test method
then runs against your plugin::

    from xtrain.core.testing import StrategyConformance

    class TestMyStrategy(StrategyConformance):
        strategy = "my_strategy"
        devices = 2

Tests that need hardware you do not have skip with the reason. Multi-process strategies are checked by running the
tiny model in real processes (see :mod:`xtrain.core.testing.processes`), never with fake process groups. A failing
check says which contract rule it checks, what it expected and what it saw.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from xtrain.core._internal.resolve import resolve
from xtrain.core.accelerator import Accelerator
from xtrain.core.errors import ConfigError
from xtrain.core.registry import ACCELERATORS, STRATEGIES
from xtrain.core.strategy import Strategy
from xtrain.core.testing._check import check, check_declared_data, fail, require_registered_name
from xtrain.core.testing.conformance_environment import ClusterEnvironmentConformance
from xtrain.core.testing.conformance_plugins import CheckpointIOConformance, PrecisionConformance
from xtrain.core.testing.doubles import simulate_devices
from xtrain.core.testing.processes import python_command, run_processes, torchrun_command

__all__ = ["AcceleratorConformance", "CheckpointIOConformance", "ClusterEnvironmentConformance",
           "PrecisionConformance", "StrategyConformance", "run_probe"]


def run_probe(tmp_path: Path, settings: dict[str, Any], *, launch: str = "script", nprocs: int = 1,
              timeout: float = 120.0, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Train the tiny model with Trainer ``settings`` in real processes; returns every rank's probe record.

    ``launch="script"`` runs one process (the strategy's launcher starts the others), ``"torchrun"`` starts
    ``nprocs`` processes with torchrun. ``env`` adds environment variables.
    """
    args = ["-m", "xtrain.core.testing._probe", json.dumps(settings), str(tmp_path)]
    if launch == "torchrun":
        command = torchrun_command(*args, nproc_per_node=nprocs)
    else:
        command = python_command(*args)
    result = run_processes([command], timeout=timeout, cwd=tmp_path, envs=[env] if env else None)
    if result.timed_out or any(code != 0 for code in result.returncodes):
        fail("training with these settings runs to the end", f"Trainer({settings}) fits the tiny model, exit code 0",
             f"exit codes {result.returncodes}, timed out: {result.timed_out}, output:\n{result.output}")
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    check(records, "every rank reaches on_train_end", "a probe record from each rank",
          f"no rank wrote one; output:\n{result.output}")
    return sorted(records, key=lambda r: r["rank"])


def _is_available(accelerator: str) -> bool:
    loaded = ACCELERATORS.load(accelerator)
    return bool(loaded.is_available()) if isinstance(loaded, type) else True  # type: ignore[attr-defined]


class AcceleratorConformance:
    """Checks an Accelerator: declared data, registration, ``devices=`` rules, and a real step when available.

    The ``devices=`` rules, auto-selection and the strategy's device are checked with the device count simulated
    (:func:`~xtrain.core.testing.simulate_devices`), so they run on any machine; the rest needs the hardware and
    skips without it.

    Attributes:
        accelerator: The class under test (required).
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
            reason = self.accelerator.unavailable_reason()
            pytest.skip(f"accelerator {self.accelerator.name!r} is not available on this machine"
                        + (f": {reason}" if reason else ""))

    def test_declares_capabilities_as_data(self) -> None:
        acc = self.accelerator
        check_declared_data("xtrain.accelerators", acc, "Accelerator")
        reason = acc.unavailable_reason()
        check(reason is None or isinstance(reason, str), "Accelerator.unavailable_reason() returns str or None",
              "None or a sentence saying how to make the accelerator available", repr(reason))

    def test_is_registered_by_name(self) -> None:
        name = self._name
        check(name in ACCELERATORS, "registered in the 'xtrain.accelerators' entry-point group",
              f"an entry point named {name!r} (pip install -e your package after adding it)",
              f"registered names: {ACCELERATORS.names()}")
        loaded = ACCELERATORS.load(name)
        check(loaded is self.accelerator or isinstance(loaded(), self.accelerator),
              "the entry point names the accelerator class (or a factory of it)",
              f"{self.accelerator.__qualname__}", repr(loaded))

    def test_availability_and_count_are_consistent(self) -> None:
        available, count = self.accelerator.is_available(), self.accelerator.device_count()
        check(isinstance(available, bool), "Accelerator.is_available() returns a bool", "True or False",
              repr(available))
        check(isinstance(count, int) and count >= 0, "Accelerator.device_count() returns an int >= 0",
              "0 when unavailable, the number of devices otherwise", repr(count))
        check(not available or count >= 1, "an available accelerator has at least one device",
              "device_count() >= 1 when is_available() is True", f"is_available()={available}, device_count()={count}")

    @pytest.mark.parametrize("bad", [0, [], True, 1.5, "2", [0, 0], -2, "x"])
    def test_rejects_ambiguous_or_invalid_devices(self, bad: Any) -> None:
        try:
            parsed = self.accelerator.parse_devices(bad)
        except ConfigError as err:
            check("devices=" in str(err), "a refused devices= names the argument", "'devices=' in the message",
                  str(err))
            return
        fail("Accelerator.parse_devices refuses invalid or ambiguous devices= (keep the base class's rule)",
             f"ConfigError for devices={bad!r}", f"accepted as {parsed!r}")

    def test_parses_every_spelling_with_simulated_devices(self) -> None:
        n = self.simulated_device_count
        every = list(range(n))
        accepted: list[tuple[Any, list[int]]] = [
            (1, [0]), (n, every), (-1, every), ("-1", every), ([n - 1], [n - 1]), ((0, n - 1), [0, n - 1]),
            (",".join(map(str, every)), every), (f"{n - 1},", [n - 1]), (f" 0 , {n - 1} ", [0, n - 1]),
        ]
        rule = "Accelerator.parse_devices reads devices= like every accelerator (simulated device count)"
        with simulate_devices(self.accelerator, n) as acc:
            for devices, expected in accepted:
                seen = acc.parse_devices(devices)
                check(seen == expected, rule, f"devices={devices!r} -> {expected}", seen)
            seen = acc.parse_devices("auto")
            check(seen == list(range(acc.auto_device_count())), rule,
                  f"devices='auto' -> the first auto_device_count()={acc.auto_device_count()} devices", seen)
            rejected: list[Any] = [0, [], True, 1.5, "2", [0, 0], -2, [-1], ["0"], "a,b"]
            if acc.device_index_limit:
                rejected += [n + 1, [n], f"0,{n}"]
            for devices in rejected:
                try:
                    parsed = acc.parse_devices(devices)
                except ConfigError as err:
                    check("devices=" in str(err) and "Fix:" in str(err), "a refused devices= names it and a fix",
                          "'devices=' and 'Fix:' in the message", str(err))
                    continue
                fail(rule, f"ConfigError for devices={devices!r} with {n} devices", f"accepted as {parsed!r}")

    def test_strategy_device_comes_from_the_accelerator(self) -> None:
        """Lightning #18902: the strategy must run on the accelerator's device, never fall back to the CPU."""
        n = self.simulated_device_count
        rule = "the strategy's device is Accelerator.get_device(index) (never a silent CPU fall-back)"
        with simulate_devices(self.accelerator, n) as acc:
            chosen = resolve(accelerator=self._name, devices=[n - 1], strategy=acc.default_strategy).strategy
            check(type(chosen.accelerator) is acc, rule, f"strategy.accelerator is a {acc.__name__}",
                  type(chosen.accelerator).__name__)
            check(chosen.root_device == acc().get_device(n - 1), rule, f"root_device {acc().get_device(n - 1)}",
                  chosen.root_device)
            check(chosen.root_device.type == acc.device_type, "get_device returns devices of device_type",
                  f"device type {acc.device_type!r}", chosen.root_device.type)
            automatic = resolve(accelerator=self._name, devices=1).strategy
            check(automatic.root_device == acc().get_device(0), rule,
                  f"with default_strategy={acc.default_strategy!r}: root_device {acc().get_device(0)}",
                  automatic.root_device)

    def test_unavailable_is_refused_listing_what_is_available(self) -> None:
        with simulate_devices(self.accelerator, 0):
            try:
                resolve(accelerator=self._name)
            except ConfigError as err:
                message = str(err)
                check(message.startswith(f"accelerator={self._name!r}:") and "is not available" in message
                      and "Fix:" in message, "asking for an unavailable accelerator by name is a clear ConfigError",
                      f"accelerator={self._name!r}: ... is not available ... Fix: ...", message)
                return
        fail("an unavailable accelerator is refused before anything starts", "ConfigError when is_available() is False",
             "resolve() accepted it")

    def test_auto_selection_follows_the_declared_priority(self) -> None:
        with simulate_devices(self.accelerator, self.simulated_device_count) as acc:
            chosen = resolve(accelerator="auto", devices=1).strategy.accelerator
            check(chosen.is_available(), "accelerator='auto' picks an available accelerator",
                  "is_available() is True", f"{chosen.name!r} is not available")
            check((chosen.auto_priority, chosen.name) >= (acc.auto_priority, acc.name),
                  "accelerator='auto' picks the available accelerator with the highest auto_priority",
                  f"{acc.name!r} (priority {acc.auto_priority}) or one ranked higher",
                  f"{chosen.name!r} (priority {chosen.auto_priority})")

    def test_parses_one_device(self) -> None:
        self._available()
        check(self.accelerator.parse_devices(1) == [0], "devices=1 is the first device", [0],
              self.accelerator.parse_devices(1))
        device = self.accelerator().get_device(0)
        check(device.type == self.accelerator.device_type, "get_device returns devices of device_type",
              self.accelerator.device_type, device.type)

    def test_device_stats_are_numbers(self) -> None:
        self._available()
        stats = self.accelerator().get_device_stats(self.accelerator().get_device(0))
        check(isinstance(stats, dict) and all(isinstance(k, str) and isinstance(v, (int, float))
                                              for k, v in stats.items()),
              "Accelerator.get_device_stats returns {str: number}", "e.g. {'memory_used_mb': 12.0}", stats)

    def test_trains_on_its_own_device(self, tmp_path: Path) -> None:
        self._available()
        records = run_probe(tmp_path, {"accelerator": self._name, "devices": 1})
        r = records[0]
        check(r["device_type"] == self.accelerator.device_type, "training runs on the accelerator's device",
              self.accelerator.device_type, r["device_type"])
        check(r["losses"][-1] < r["losses"][0], "the tiny model learns on the device", "a decreasing loss",
              r["losses"])


class StrategyConformance:
    """Checks a Strategy: declared data, registration, and real training with collectives on ``devices`` ranks.

    The training check runs the tiny model in real processes (the strategy's own launcher starts the ranks, or
    torchrun) with gradient accumulation, then checks the loss fell, every rank holds the same weights, the
    collectives' answers, that backward passes inside ``no_backward_sync`` keep each rank's own gradients, and that
    a checkpoint (weights and the precision's state) reads back equal.

    Attributes:
        strategy: The registered name under test (required).
        accelerator: The accelerator name to train on; the test skips where it is unavailable.
        devices: The ``devices=`` to train with: ``1`` for a single-process strategy, ``2`` or more to check
            collectives across real processes.
        precision: The ``precision=`` to train with.
        launch: ``"script"``: one process is started and the strategy's launcher starts the others;
            ``"torchrun"``: torchrun starts ``devices`` processes (for strategies without a launcher of their own).
        timeout: Seconds before the training run is killed and the test fails.
        accumulate_grad_batches: The gradient accumulation the training check uses (``1`` turns it off, for
            strategies that refuse accumulation with a ConfigError).
        checks_no_backward_sync: Whether to check that ``no_backward_sync(True)`` leaves each rank's gradients
            unsynchronized (multi-process runs only).
    """

    strategy: ClassVar[str]
    accelerator: ClassVar[str] = "cpu"
    devices: ClassVar[int] = 1
    precision: ClassVar[str] = "32-true"
    launch: ClassVar[str] = "script"
    timeout: ClassVar[float] = 180.0
    accumulate_grad_batches: ClassVar[int] = 2
    checks_no_backward_sync: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        require_registered_name(cls, "strategy", "xtrain.strategies")

    def _make(self) -> Strategy:
        created = STRATEGIES.create(self.strategy)
        check(isinstance(created, Strategy), "the entry point creates a Strategy", "a Strategy instance",
              repr(created))
        assert isinstance(created, Strategy)
        return created

    def test_declares_capabilities_as_data(self) -> None:
        check_declared_data("xtrain.strategies", self._make(), "Strategy")

    def test_is_registered_by_name(self) -> None:
        check(self.strategy in STRATEGIES, "registered in the 'xtrain.strategies' entry-point group",
              f"an entry point named {self.strategy!r}", f"registered names: {STRATEGIES.names()}")

    def test_trains_and_collectives_agree(self, tmp_path: Path) -> None:
        if not _is_available(self.accelerator):
            pytest.skip(f"accelerator {self.accelerator!r} is not available here")
        settings = {"strategy": self.strategy, "accelerator": self.accelerator, "devices": self.devices,
                    "precision": self.precision, "accumulate_grad_batches": self.accumulate_grad_batches,
                    "probe_no_backward_sync": self.checks_no_backward_sync}
        records = run_probe(tmp_path, settings, launch=self.launch, nprocs=self.devices, timeout=self.timeout)
        world = records[0]["world_size"]
        check(len(records) == world and [r["rank"] for r in records] == list(range(world)),
              "Strategy.world_size and global_rank describe the processes that ran",
              f"one record from each rank 0..{world - 1}", [r["rank"] for r in records])
        expected_sum = world * (world + 1) / 2
        zero = records[0]
        for r in records:
            rank = f"rank {r['rank']}"
            check(r["losses"][-1] < r["losses"][0], "training with this strategy lowers the tiny model's loss",
                  "a decreasing loss", f"{rank}: {r['losses']}")
            check(r["global_step"] == r["max_steps"], "optimizer steps are counted once per accumulation window",
                  f"global_step {r['max_steps']} (accumulate_grad_batches={self.accumulate_grad_batches})",
                  f"{rank}: {r['global_step']}")
            for key, expected, rule in (
                    ("reduce_sum", expected_sum, "reduce(op='sum') sums over every rank"),
                    ("reduce_mean", expected_sum / world, "reduce(op='mean') averages over every rank"),
                    ("reduce_max", world, "reduce(op='max') is the largest value of any rank"),
                    ("all_gather", [float(i + 1) for i in range(world)], "all_gather stacks every rank's tensor"),
                    ("broadcast", 0, "broadcast(obj, src=0) gives every rank rank 0's object"),
                    ("any_rank_zero", True, "reduce_boolean_decision(all=False) is True if any rank says so"),
                    ("all_rank_zero", world == 1, "reduce_boolean_decision(all=True) needs every rank")):
                check(r[key] == expected, f"Strategy collectives: {rule}",
                      f"{expected!r} (each rank contributes rank + 1)", f"{rank}: {r[key]!r}")
            check(abs(r["param_sum"] - zero["param_sum"]) <= 1e-6 * max(1.0, abs(zero["param_sum"])),
                  "every rank holds the same weights after training (initial weights broadcast, gradients averaged)",
                  f"rank 0's parameter sum {zero['param_sum']!r}", f"{rank}: {r['param_sum']!r}")
        self._check_no_backward_sync(records)
        if zero["checkpoint_keys"]:
            check(zero["checkpoint_params_equal"], "a checkpoint reads back the weights it saved",
                  "load_checkpoint(save_checkpoint(...))['state_dict'] equals module_state_dict()", "they differ")
            check(zero["checkpoint_precision_equal"], "a checkpoint reads back the precision plugin's state",
                  "checkpoint['precision'] equals precision.state_dict() after a round trip", "they differ")
            manifest = zero["checkpoint_manifest"]
            check(manifest.get("world_size") == world and manifest.get("strategy") == self._make().name,
                  "the checkpoint manifest records the strategy and world size",
                  f"strategy={self._make().name!r}, world_size={world}", manifest)

    def _check_no_backward_sync(self, records: list[dict[str, Any]]) -> None:
        sums = [r.get("no_sync_grad_sum") for r in records]
        errors = [r.get("no_sync_error") for r in records if r.get("no_sync_error")]
        check(not errors, "backward inside Strategy.no_backward_sync(True) works", "no error", errors)
        if len(records) < 2 or None in sums:
            return  # one process, or the strategy keeps unsynchronized gradients off the parameters (sharded)
        check(len(set(sums)) == len(sums),
              "Strategy.no_backward_sync(True): backward passes inside it do not synchronize gradients",
              "each rank's own gradient (rank-dependent batches give rank-dependent sums)",
              f"gradient sums per rank {sums}")

"""Resolving ``precision=``: names, legacy spellings, conflicts, declared capabilities, install hints, versions."""

from __future__ import annotations

import importlib
import tomllib
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

import xtrain.core.compat
import xtrain.precision
from xtrain.core import ConfigError, Trainer
from xtrain.core._internal.hints import first_party_names
from xtrain.core.defaults import CPUAccelerator, SingleDeviceStrategy
from xtrain.core.registry import PRECISIONS
from xtrain.precision import (
    BFloat16MixedPrecision,
    BFloat16TruePrecision,
    DoublePrecision,
    Float16MixedPrecision,
    Float16TruePrecision,
    SlowPrecisionWarning,
)
from xtrain.precision._internal import hardware

PACKAGE = Path(__file__).resolve().parents[1]
OURS = {"64-true": DoublePrecision, "16-mixed": Float16MixedPrecision, "bf16-mixed": BFloat16MixedPrecision,
        "16-true": Float16TruePrecision, "bf16-true": BFloat16TruePrecision}


def precision_of(**kwargs: Any) -> Any:
    return Trainer(logger=False, enable_progress_bar=False, **kwargs).strategy.precision


@pytest.mark.parametrize("name", list(OURS))
def test_every_name_resolves_to_its_class(name: str) -> None:
    assert type(precision_of(precision=name)) is OURS[name]
    assert type(precision_of(precision=name.upper())) is OURS[name]
    assert PRECISIONS.distribution_of(name) == "xtrain-precision"


def test_entry_points_match_cores_install_hints() -> None:
    """Core's hint table names exactly this package's entry points, so a missing name gets the right pip line."""
    ours = {ep.name: ep.dist.name for ep in entry_points(group="xtrain.precision")
            if ep.dist is not None and ep.dist.name == "xtrain-precision"}
    assert ours == first_party_names("xtrain.precision")
    assert set(ours) == set(OURS)


@pytest.mark.parametrize(("given", "expected", "warns"), [
    (16, Float16MixedPrecision, True), ("16", Float16MixedPrecision, True), ("bf16", BFloat16MixedPrecision, True),
    (64, DoublePrecision, False), ("64", DoublePrecision, False),
])
def test_legacy_spellings(given: object, expected: type, warns: bool) -> None:
    if warns:
        with pytest.warns(UserWarning, match=f"means precision='{expected.name}'"):  # type: ignore[attr-defined]
            assert type(precision_of(precision=given)) is expected
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert type(precision_of(precision=given)) is expected


def test_unknown_precision_lists_every_registered_name() -> None:
    with pytest.raises(ConfigError, match=r"^precision='fp8':") as info:
        precision_of(precision="fp8")
    for name in [*OURS, "32-true"]:
        assert repr(name) in str(info.value)


def test_instances_and_plugins() -> None:
    mine = Float16MixedPrecision(init_scale=8.0)
    assert precision_of(precision=mine) is mine
    assert precision_of(plugins=[mine]) is mine
    assert type(precision_of(plugins=["bf16-true"])) is BFloat16TruePrecision


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"precision": "16-mixed", "plugins": [BFloat16MixedPrecision()]}, r"^precision='16-mixed': is set here and also "
                                                                       r"as plugins="),
    ({"precision": "bf16-mixed", "plugins": BFloat16MixedPrecision()}, "also as plugins"),
    ({"plugins": [BFloat16MixedPrecision(), Float16MixedPrecision()]}, r"^plugins=.*holds more than one Precision"),
    ({"plugins": ["bf16-mixed", "16-true"]}, "holds more than one Precision"),
    ({"strategy": SingleDeviceStrategy(precision=DoublePrecision()), "precision": "64-true"}, "also inside strategy"),
])
def test_precision_given_twice_is_a_config_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        precision_of(**kwargs)
    assert "Fix:" in str(info.value)


class BF16OnlyStrategy(SingleDeviceStrategy):
    """A strategy that declares it accepts only some precisions."""

    name: ClassVar[str] = "bf16_only"
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset({"32-true", "bf16-mixed", "bf16-true"})


class NoHalfCPU(CPUAccelerator):
    """A CPU accelerator declaring that its hardware runs no half precision."""

    name: ClassVar[str] = "nohalf_cpu"
    supported_precisions: ClassVar[frozenset[str] | None] = frozenset({"32-true", "64-true", "bf16-true"})


class NoAutocastCPU(CPUAccelerator):
    """A CPU accelerator whose declared autocast device type torch cannot autocast."""

    name: ClassVar[str] = "noautocast_cpu"
    autocast_device_type: ClassVar[str] = "meta"


def test_a_strategy_refusing_a_precision_lists_the_ones_that_work() -> None:
    with pytest.raises(ConfigError) as info:
        precision_of(strategy=BF16OnlyStrategy(), precision="16-mixed")
    assert str(info.value).startswith("precision='16-mixed': is not supported by strategy='bf16_only'.")
    assert "Valid choices: '32-true', 'bf16-mixed', 'bf16-true'." in str(info.value)
    assert type(precision_of(strategy=BF16OnlyStrategy(), precision="bf16-mixed")) is BFloat16MixedPrecision


def test_an_accelerator_refusing_a_precision_lists_the_ones_that_work() -> None:
    with pytest.raises(ConfigError) as info:
        precision_of(accelerator=NoHalfCPU(), precision="16-mixed")
    assert "is not supported by accelerator='nohalf_cpu'" in str(info.value)
    assert "Valid choices: '32-true', '64-true', 'bf16-true'." in str(info.value)
    with pytest.raises(ConfigError) as both:
        precision_of(accelerator=NoHalfCPU(), strategy=BF16OnlyStrategy(), precision="64-true")
    assert "Valid choices: '32-true', 'bf16-true'." in str(both.value), "choices must satisfy both declarations"
    assert type(precision_of(accelerator=NoHalfCPU(), precision="64-true")) is DoublePrecision


def test_mixed_precision_needs_autocast_on_the_declared_device_type() -> None:
    with pytest.raises(ConfigError, match="autocast device type 'meta'") as info:
        precision_of(accelerator=NoAutocastCPU(), precision="bf16-mixed")
    assert "Fix: choose a '-true' precision" in str(info.value)
    assert type(precision_of(accelerator=NoAutocastCPU(), precision="bf16-true")) is BFloat16TruePrecision


def test_mixed_precision_autocasts_on_the_declared_device_type() -> None:
    p = precision_of(precision="bf16-mixed")
    assert p.device_type == CPUAccelerator.autocast_device_type
    with p.forward_context():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")


def test_without_this_package_its_names_give_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a user with only xtrain-core sees (the build session's smoke test checks it with the core wheel)."""
    entries = PRECISIONS._scan()
    monkeypatch.setattr(PRECISIONS, "_entries", {k: v for k, v in entries.items()
                                                 if "xtrain-precision" not in v.distributions})
    monkeypatch.setattr(PRECISIONS, "_loaded", {})
    for name in OURS:
        with pytest.raises(ConfigError, match=f"^precision='{name}': is provided by xtrain-precision, which is not "
                                              f"installed.*Fix: pip install xtrain-precision$"):
            precision_of(precision=name)


def test_core_version_is_checked_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    pin = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "xtrain-core>=1.0,<2" in pin
    try:
        for too_old_or_new in ("0.9.0", "2.0.0"):
            monkeypatch.setattr(xtrain.core.compat, "core_version", too_old_or_new)
            with pytest.raises(ImportError, match=rf"xtrain-precision {xtrain.precision.__version__} needs "
                                                  rf"xtrain-core>=1.0,<2, but xtrain-core {too_old_or_new}"):
                importlib.reload(xtrain.precision)
        monkeypatch.setattr(xtrain.core.compat, "core_version", "1.99.0")
        importlib.reload(xtrain.precision)
    finally:
        monkeypatch.undo()
        importlib.reload(xtrain.precision)


@pytest.mark.parametrize(("name", "dtype"), [("16-mixed", torch.float16), ("16-true", torch.float16),
                                             ("bf16-mixed", torch.bfloat16), ("bf16-true", torch.bfloat16)])
def test_emulated_precisions_warn_once_on_cpu(monkeypatch: pytest.MonkeyPatch, name: str, dtype: torch.dtype) -> None:
    monkeypatch.setattr(hardware, "_warned", set())
    monkeypatch.setattr(hardware, "cpu_has_native", lambda d: d != dtype)
    with pytest.warns(SlowPrecisionWarning, match=f"precision='{name}' on the CPU: this CPU has no native") as rec:
        precision_of(precision=name)
    alternative = {"16-mixed": "bf16-mixed", "16-true": "bf16-true"}.get(name, "32-true")
    assert f"precision={alternative!r} is likely faster here" in str(rec[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowPrecisionWarning)
        precision_of(precision=name)  # once per process
        monkeypatch.setattr(hardware, "_warned", set())
        monkeypatch.setattr(hardware, "cpu_has_native", lambda d: True)
        precision_of(precision=name)  # native hardware: silent
        hardware.warn_if_slow(name, "cuda", dtype)  # only the CPU is judged here


def test_cpu_capability_probe_answers_for_every_dtype() -> None:
    assert hardware.cpu_has_native(torch.float32) and hardware.cpu_has_native(torch.float64)
    assert isinstance(hardware.cpu_has_native(torch.float16), bool)
    assert isinstance(hardware.cpu_has_native(torch.bfloat16), bool)


@pytest.mark.parametrize(("given", "advice"), [("fp16", "precision='16-mixed'"), ("half", "'16-true'"),
                                               (torch.bfloat16, "precision='bf16-mixed'"),
                                               ("double", "precision='64-true'"),
                                               ("transformer-engine", "Transformer Engine precision has no xtrain")])
def test_other_frameworks_precision_spellings_are_told_xtrains_name(given: Any, advice: str) -> None:
    with pytest.raises(ConfigError, match=r"is not a registered precision name") as info:
        Trainer(accelerator="cpu", precision=given)
    assert advice in str(info.value)

"""The conformance kit for precisions and checkpoint IO (see :mod:`.conformance`)."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from xtrain.core.checkpoint_io import CheckpointIO
from xtrain.core.errors import CheckpointError
from xtrain.core.precision import Precision
from xtrain.core.registry import ACCELERATORS, CHECKPOINT_IO, PRECISIONS
from xtrain.core.testing._check import check, check_declared_data, fail, require_registered_name
from xtrain.core.testing._probe import same_value

__all__ = ["CheckpointIOConformance", "PrecisionConformance"]


def _probe(tmp_path: Path, settings: dict[str, Any]) -> dict[str, Any]:
    from xtrain.core.testing.conformance import run_probe

    return run_probe(tmp_path, settings)[0]


class PrecisionConformance:
    """Checks a Precision: declared data, registration, dtypes and numerics inside the step, state round trips.

    Attributes:
        precision: The registered name under test (required).
        accelerator: The accelerator to check and train on; the device checks skip where it is unavailable.
        expected_param_dtype: The dtype of the module's floating point parameters after ``convert_module``.
        expected_activation_dtype: The dtype of a ``Linear`` layer's output inside ``forward_context``.
        numerics_dtype: The dtype whose rounding the step's results must show: their error against a float64
            reference is at most that dtype's (and, below float32, more than float32's, proving the precision changes
            numerics). Default: the less precise of the two expected dtypes; a simulated format that keeps float32
            tensors but rounds like fp8 sets ``torch.float8_e4m3fn``.
        numerics_tolerance: The allowed error, in units of ``numerics_dtype``'s machine epsilon, relative to the
            largest output.
    """

    precision: ClassVar[str]
    accelerator: ClassVar[str] = "cpu"
    expected_param_dtype: ClassVar[torch.dtype] = torch.float32
    expected_activation_dtype: ClassVar[torch.dtype] = torch.float32
    numerics_dtype: ClassVar[torch.dtype | None] = None
    numerics_tolerance: ClassVar[float] = 16.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        require_registered_name(cls, "precision", "xtrain.precision")

    def _make(self) -> Precision:
        created = PRECISIONS.create(self.precision)
        check(isinstance(created, Precision), "the entry point creates a Precision", "a Precision instance",
              repr(created))
        assert isinstance(created, Precision)
        return created

    def _skip_unless_available(self) -> None:
        loaded = ACCELERATORS.load(self.accelerator)
        if isinstance(loaded, type) and not loaded.is_available():  # type: ignore[attr-defined]
            pytest.skip(f"accelerator {self.accelerator!r} is not available here")

    def test_declares_capabilities_as_data(self) -> None:
        p = self._make()
        check_declared_data("xtrain.precision", p, "Precision")
        check(p.name == self.precision, "Precision.name is the registered name", repr(self.precision), repr(p.name))

    def test_is_registered_by_name(self) -> None:
        check(self.precision in PRECISIONS, "registered in the 'xtrain.precision' entry-point group",
              f"an entry point named {self.precision!r}", f"registered names: {PRECISIONS.names()}")

    def test_module_dtype_matches_param_dtype(self) -> None:
        """``param_dtype`` is what ``convert_module`` and ``module_init_context`` produce (float32 when ``None``).

        A plugin that replaces layers (quantized weights) overrides this test with its own expectation.
        """
        p = self._make()
        expected = p.param_dtype or torch.float32
        check(expected == self.expected_param_dtype, "Precision.param_dtype agrees with the kit's expected_param_dtype",
              str(self.expected_param_dtype), f"param_dtype={p.param_dtype}")
        converted = {t.dtype for t in p.convert_module(torch.nn.Linear(2, 2)).parameters()}
        check(converted == {expected}, "convert_module gives parameters of param_dtype", str(expected), converted)
        with p.module_init_context():
            created = {t.dtype for t in torch.nn.Linear(2, 2).parameters()}
        check(created == {expected}, "module_init_context creates parameters in param_dtype", str(expected), created)
        check(torch.get_default_dtype() == torch.float32, "module_init_context restores torch's default dtype",
              "torch.float32 after the block", torch.get_default_dtype())

    def test_converts_input_is_truthful(self) -> None:
        """Hot paths skip ``convert_input`` when ``converts_input`` is ``False``, so it must then be the identity."""
        p = self._make()
        batch = (torch.randn(2, 3), torch.tensor([0, 1]))
        converted = p.convert_input(batch)
        if not p.converts_input:
            check(converted is batch or all(a is b for a, b in zip(converted, batch, strict=True)),
                  "converts_input=False means convert_input returns its argument", "the same tensors",
                  [t.dtype for t in converted])
        else:
            check(converted[1].dtype == torch.int64, "convert_input leaves integer tensors (labels) alone",
                  "torch.int64", converted[1].dtype)

    def test_numerics_follow_the_declared_dtypes(self) -> None:
        """A Linear layer run through the plugin computes in the declared dtypes, and its rounding shows it."""
        self._skip_unless_available()
        accelerator = ACCELERATORS.create(self.accelerator)
        device = accelerator.get_device(0)
        p = self._make()
        p.connect(device_type=accelerator.autocast_device_type)
        g = torch.Generator().manual_seed(0)
        layer = torch.nn.Linear(64, 64)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(64, 64, generator=g) / 8)
            layer.bias.copy_(torch.randn(64, generator=g))
            x = torch.randn(32, 64, generator=g)
            reference = x.double() @ layer.weight.double().T + layer.bias.double()
        module = p.convert_module(copy.deepcopy(layer)).to(device)
        batch = p.convert_input(x.to(device))
        with torch.no_grad(), p.forward_context():
            out = module(batch)
        check(out.dtype == self.expected_activation_dtype,
              "forward_context/convert_input compute in the declared activation dtype",
              f"a Linear output of {self.expected_activation_dtype}", out.dtype)
        dtype = self.numerics_dtype or max(self.expected_param_dtype, self.expected_activation_dtype,
                                           key=lambda d: torch.finfo(d).eps)
        eps = torch.finfo(dtype).eps
        error = float((out.detach().double().cpu() - reference).abs().max() / reference.abs().max())
        check(error <= self.numerics_tolerance * eps, f"the results are as accurate as {dtype} allows",
              f"relative error <= {self.numerics_tolerance} * eps({dtype}) = {self.numerics_tolerance * eps:.3g}",
              f"{error:.3g}")
        single = torch.finfo(torch.float32).eps
        if eps > single:
            check(error > 4 * single, f"the precision changes numerics as declared ({dtype})",
                  f"relative error above float32's (> {4 * single:.3g}): the results are rounded like {dtype}",
                  f"{error:.3g}: computed like float32 (does forward_context/convert_module do anything?)")

    def test_state_dict_round_trips(self) -> None:
        p = self._make()
        p.connect(device_type="cpu")
        state = p.state_dict()
        q = self._make()
        q.connect(device_type="cpu")
        q.load_state_dict(copy.deepcopy(state))
        check(same_value(q.state_dict(), state), "load_state_dict(state_dict()) restores the same state",
              repr(state), repr(q.state_dict()))

    def test_trains_with_expected_dtypes(self, tmp_path: Path) -> None:
        self._skip_unless_available()
        r = _probe(tmp_path, {"precision": self.precision, "accelerator": self.accelerator, "devices": 1,
                              "max_steps": 16})
        check(r["losses"][-1] < r["losses"][0], "training with this precision lowers the tiny model's loss",
              "a decreasing loss", r["losses"])
        check(r["param_dtypes"] == [str(self.expected_param_dtype)], "parameters inside the step have param_dtype",
              [str(self.expected_param_dtype)], r["param_dtypes"])
        check(r["activation_dtypes"] == [str(self.expected_activation_dtype)],
              "activations inside training_step have the declared dtype", [str(self.expected_activation_dtype)],
              r["activation_dtypes"])
        check(r["checkpoint_precision_equal"], "the precision's state survives a checkpoint round trip",
              "checkpoint['precision'] loaded into a new plugin gives the same state_dict()", "it differs")


class CheckpointIOConformance:
    """Checks a CheckpointIO: round trip, overwrite, remove, clear errors for bad files, and a Trainer checkpoint.

    Attributes:
        checkpoint_io: The registered name under test (required).
    """

    checkpoint_io: ClassVar[str]

    def _make(self) -> CheckpointIO:
        created = CHECKPOINT_IO.create(self.checkpoint_io)
        check(isinstance(created, CheckpointIO), "the entry point creates a CheckpointIO", "a CheckpointIO",
              repr(created))
        assert isinstance(created, CheckpointIO)
        return created

    def _sample(self, value: float) -> dict[str, Any]:
        return {"state_dict": {"w": torch.full((4, 4), value)}, "meta": {"step": int(value), "name": "x"},
                "list": [1, 2.5, "three"]}

    def test_declares_capabilities_as_data(self) -> None:
        check_declared_data("xtrain.checkpoint_io", self._make(), "CheckpointIO")

    def test_is_registered_by_name(self) -> None:
        check(self.checkpoint_io in CHECKPOINT_IO, "registered in the 'xtrain.checkpoint_io' entry-point group",
              f"an entry point named {self.checkpoint_io!r}", f"registered names: {CHECKPOINT_IO.names()}")

    def test_round_trip_and_overwrite(self, tmp_path: Path) -> None:
        io = self._make()
        path = tmp_path / "a.ckpt"
        io.save_checkpoint(self._sample(1.0), path)
        io.save_checkpoint(self._sample(2.0), path)
        io.wait()
        loaded = io.load_checkpoint(path)
        check(same_value(loaded, self._sample(2.0)), "load_checkpoint returns what the last save_checkpoint wrote",
              repr(self._sample(2.0)), repr(loaded))
        left = [p for p in os.listdir(tmp_path) if p != "a.ckpt"]
        check(not left, "saving leaves no temporary files behind", "only a.ckpt", left)

    def test_copy_is_independent_of_later_saves(self, tmp_path: Path) -> None:
        io = self._make()
        io.save_checkpoint(self._sample(1.0), tmp_path / "a.ckpt")
        io.copy_checkpoint(tmp_path / "a.ckpt", tmp_path / "last.ckpt")
        io.save_checkpoint(self._sample(2.0), tmp_path / "a.ckpt")
        io.wait()
        for name, value in (("last.ckpt", 1.0), ("a.ckpt", 2.0)):
            w = io.load_checkpoint(tmp_path / name)["state_dict"]["w"]
            check(torch.equal(w, torch.full((4, 4), value)), "copy_checkpoint makes an independent copy",
                  f"{name} holds {value}", w)
        files = sorted(p.name for p in tmp_path.iterdir())
        check(files == ["a.ckpt", "last.ckpt"], "copy and save leave only the named files", ["a.ckpt", "last.ckpt"],
              files)

    def test_remove(self, tmp_path: Path) -> None:
        io = self._make()
        path = tmp_path / "a.ckpt"
        io.save_checkpoint(self._sample(1.0), path)
        io.wait()
        io.remove_checkpoint(path)
        io.wait()
        check(not path.exists(), "remove_checkpoint deletes the checkpoint (by the time wait() returns)", "no file",
              "it is still there")

    def _refused(self, path: Path, words: str) -> None:
        try:
            loaded = self._make().load_checkpoint(path)
        except CheckpointError as err:
            check(words in str(err) and str(path) in str(err), "a bad checkpoint is a CheckpointError naming the file",
                  f"{words!r} and {str(path)!r} in the message", str(err))
            return
        except Exception as err:  # noqa: BLE001 - reported as the wrong kind of error
            fail("a bad checkpoint is a CheckpointError naming the file", "CheckpointError",
                 f"{type(err).__name__}: {err}")
        fail("a bad checkpoint is a CheckpointError naming the file", "CheckpointError", f"loaded {loaded!r}")

    def test_missing_file_is_a_clear_error(self, tmp_path: Path) -> None:
        self._refused(tmp_path / "nope.ckpt", "does not exist")

    def test_truncated_file_is_a_clear_error(self, tmp_path: Path) -> None:
        io = self._make()
        path = tmp_path / "a.ckpt"
        io.save_checkpoint(self._sample(1.0), path)
        io.wait()
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        self._refused(path, "truncated or corrupted")

    def test_trainer_checkpoint_round_trips(self, tmp_path: Path) -> None:
        """A real training run saves its checkpoint through this plugin and reads it back equal."""
        r = _probe(tmp_path, {"plugins": [self.checkpoint_io], "max_steps": 4})
        check(r["checkpoint_params_equal"] and r["checkpoint_precision_equal"],
              "Trainer.save_checkpoint then strategy.load_checkpoint through this plugin give back the same state",
              "equal weights and precision state", f"weights equal: {r['checkpoint_params_equal']}, precision state "
              f"equal: {r['checkpoint_precision_equal']}")

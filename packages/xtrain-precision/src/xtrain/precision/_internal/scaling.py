"""The gradient scaler's life cycle: created for the declared device, unscaled at most once, skip detection.

``torch.amp.GradScaler`` raises when ``unscale_`` runs twice before ``update``, and its ``step`` returns the
optimizer's return value (``None`` for most optimizers) whether or not it skipped. This wrapper makes unscaling
idempotent within a step (clipping unscales first, the step must not unscale again) and reports a skipped step the
way Accelerate does: the scale only goes down when inf/NaN gradients were found.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from xtrain.core.errors import CheckpointError, ConfigError

__all__ = ["ScalerState", "check_scaler_options"]

_DEFAULTS: dict[str, float] = {"init_scale": 2.0**16, "growth_factor": 2.0, "backoff_factor": 0.5,
                               "growth_interval": 2000}
# option: (valid?, what valid means, the default to suggest)
_RULES: dict[str, tuple[Callable[[float], bool], str, str]] = {
    "init_scale": (lambda v: v > 0 and math.isfinite(v), "a finite number above 0", "2.0**16"),
    "growth_factor": (lambda v: v > 1 and math.isfinite(v), "a finite number above 1", "2.0"),
    "backoff_factor": (lambda v: 0 < v < 1, "a number strictly between 0 and 1", "0.5"),
    "growth_interval": (lambda v: isinstance(v, int) and v >= 1, "an int of at least 1", "2000"),
}


def check_scaler_options(options: dict[str, float], scaler: torch.amp.GradScaler | None) -> None:
    """Raise :class:`ConfigError` for options ``GradScaler`` would reject with a bare assertion, or would ignore."""
    if scaler is not None:
        changed = sorted(k for k, v in options.items() if v != _DEFAULTS[k])
        if changed:
            raise ConfigError(changed[0], options[changed[0]], "is ignored when a ready scaler= is passed.",
                              fix=f"configure the GradScaler you pass, or drop scaler= and keep {changed[0]}=.")
        if not isinstance(scaler, torch.amp.GradScaler):
            raise ConfigError("scaler", scaler, "is not a torch.amp.GradScaler.", fix="pass torch.amp.GradScaler(...).")
        return
    for key, (ok, what, default) in _RULES.items():
        value = options[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
            raise ConfigError(key, value, f"must be {what}.", fix=f"write {key}={default} (the default).")


def _has_grads(optimizer: torch.optim.Optimizer) -> bool:
    return any(p.grad is not None for group in optimizer.param_groups for p in group["params"])


class ScalerState:
    """One ``GradScaler`` bound to the device type the accelerator declared, plus per-step bookkeeping.

    Args:
        options: ``GradScaler`` constructor options (validated by :func:`check_scaler_options`).
        given: A ready scaler to use instead of creating one.
    """

    def __init__(self, options: dict[str, float], given: torch.amp.GradScaler | None) -> None:
        check_scaler_options(options, given)
        self._options = options
        self._given = given
        self._scaler: torch.amp.GradScaler | None = None
        self._device: str | None = None
        self._unscaled: set[int] = set()
        self._last_scale: float | None = None

    def scaler(self, device_type: str) -> torch.amp.GradScaler:
        """The scaler for ``device_type``; created (keeping any state already loaded) when the device changes."""
        if self._scaler is not None and self._device == device_type:
            return self._scaler
        if self._given is not None:
            given_device = getattr(self._given, "_device", device_type)
            if given_device != device_type:
                raise ConfigError("scaler", f"GradScaler({given_device!r})", f"scales on {given_device!r}, and the "
                                  f"accelerator computes on {device_type!r}.",
                                  fix=f"pass torch.amp.GradScaler({device_type!r}, ...).")
            created = self._given
        else:
            created = torch.amp.GradScaler(device_type, **self._options)  # type: ignore[arg-type]
            if self._scaler is not None:
                created.load_state_dict(self._scaler.state_dict())
        self._scaler, self._device, self._last_scale = created, device_type, None
        return created

    def unscale(self, optimizer: torch.optim.Optimizer, device_type: str) -> None:
        """Divide ``optimizer``'s gradients by the scale, once per step whoever asks (clipping, the step)."""
        if id(optimizer) in self._unscaled or not _has_grads(optimizer):
            return
        self.scaler(device_type).unscale_(optimizer)
        self._unscaled.add(id(optimizer))

    def step(self, optimizer: torch.optim.Optimizer, device_type: str) -> bool:
        """Step unless gradients hold inf/NaN, update the scale; returns whether the optimizer stepped.

        The scale before the step is remembered from the previous update, so detecting a skip costs one host sync
        per step (reading the new scale) on top of the one ``GradScaler.step`` makes anyway.
        """
        scaler = self.scaler(device_type)
        if not _has_grads(optimizer):
            optimizer.step()
            return True
        before = self._last_scale if self._last_scale is not None else scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        self._unscaled.clear()
        after = scaler.get_scale()
        self._last_scale = after
        return not after < before

    def load(self, state: Any, device_type: str) -> None:
        """Restore a ``GradScaler.state_dict()`` (scale, growth tracker, factors, interval) exactly."""
        scaler = self.scaler(device_type)
        try:
            scaler.load_state_dict(state)
        except (KeyError, TypeError, RuntimeError, AttributeError) as err:
            raise CheckpointError(f"the checkpoint's precision state is not a GradScaler state ({err!r}). Resume "
                                  f"with the precision it was written with, or load weights only.") from err
        self._unscaled.clear()
        self._last_scale = None

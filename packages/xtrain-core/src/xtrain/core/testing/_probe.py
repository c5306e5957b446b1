"""The script the strategy and precision conformance checks run: trains the tiny model, probes collectives.

``python -m xtrain.core.testing._probe '<json settings>' <output dir>``. Each rank writes ``rank<N>.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from xtrain.core.callbacks.callback import Callback
from xtrain.core.module import TrainModule
from xtrain.core.registry import PRECISIONS
from xtrain.core.seed import seed_everything
from xtrain.core.testing.models import TinyClassifier, tiny_loaders
from xtrain.core.trainer import Trainer

__all__ = ["Probe", "main", "same_value"]


class Probe(Callback):
    """Records what a conformance check asserts, on every rank, at the end of training."""

    def __init__(self, out: Path, *, max_steps: int = 0, no_backward_sync: bool = False) -> None:
        self.out = out
        self.max_steps = max_steps
        self.no_backward_sync = no_backward_sync
        self.step_dtypes: dict[str, str] = {}

    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int, /) -> None:
        self.step_dtypes["input"] = str(batch[0].dtype)

    def on_train_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        s = trainer.strategy
        rank, world = s.global_rank, s.world_size
        one = torch.tensor(float(rank + 1))
        params = torch.cat([_full(p.detach()).float().reshape(-1).cpu() for p in module.parameters()])
        no_sync = _no_sync_gradients(trainer, module) if self.no_backward_sync and world > 1 else {}
        ckpt = self.out / "probe.ckpt"
        trainer.save_checkpoint(ckpt)
        loaded = s.load_checkpoint(ckpt)  # a file, or a sharded directory read into this rank's shards
        record = {
            "rank": rank, "world_size": world, "local_rank": s.local_rank,
            "device_type": s.root_device.type, "losses": getattr(module, "losses", []),
            "global_step": trainer.global_step, "max_steps": self.max_steps, **no_sync,
            "param_sum": float(params.double().sum()), "param_abs_sum": float(params.double().abs().sum()),
            "param_dtypes": sorted(str(d) for d in getattr(module, "param_dtypes", set())),
            "activation_dtypes": sorted(str(d) for d in getattr(module, "activation_dtypes", set())),
            "input_dtype": self.step_dtypes.get("input"),
            "reduce_sum": float(s.reduce(one, op="sum").cpu()), "reduce_mean": float(s.reduce(one, op="mean").cpu()),
            "reduce_max": float(s.reduce(one, op="max").cpu()),
            "all_gather": s.all_gather(one).cpu().tolist(),
            "broadcast": s.broadcast({"from": rank}, 0)["from"],
            "any_rank_zero": s.reduce_boolean_decision(rank == 0, all=False),
            "all_rank_zero": s.reduce_boolean_decision(rank == 0, all=True),
            "checkpoint_keys": sorted(loaded.keys()), "checkpoint_manifest": loaded.get("xtrain", {}),
            "checkpoint_params_equal": _same_state(loaded.get("state_dict", {}), s.module_state_dict()),
            "checkpoint_precision_equal": _precision_round_trips(trainer, loaded.get("precision")),
        }
        s.barrier("probe")
        (self.out / f"rank{rank}.json").write_text(json.dumps(record, default=str))


def _no_sync_gradients(trainer: Trainer, module: TrainModule) -> dict[str, Any]:
    """A backward pass on a rank-dependent batch inside ``no_backward_sync(True)``: each rank's gradient sum.

    ``None`` when no gradient is visible on the parameters (sharded strategies keep unsynchronized ones elsewhere).
    """
    s = trainer.strategy
    first = next(p for p in module.parameters() if p.dim() == 2)
    x = torch.full((4, first.shape[1]), float(s.global_rank + 1), device=s.root_device)
    y = torch.zeros(4, dtype=torch.long, device=s.root_device)
    module.zero_grad(set_to_none=True)
    # A step that neither logs nor records losses (the loop has ended); it still goes through run_step, so a
    # wrapper's gradient hooks (DDP's) see it.
    module.training_step = lambda batch, _: (  # type: ignore[method-assign,assignment]
        torch.nn.functional.cross_entropy(module(batch[0]).float(), batch[1]))
    try:
        with s.no_backward_sync(True):
            s.backward(s.run_step("training_step", (x, y), 0))
    except Exception as err:  # noqa: BLE001 - reported by the kit with the contract rule it breaks
        return {"no_sync_error": f"{type(err).__name__}: {err}"}
    finally:
        del module.training_step
    grads = [p.grad for p in module.parameters() if p.grad is not None and not hasattr(p.grad, "full_tensor")]
    total = float(sum(g.double().sum() for g in grads)) if grads else None
    module.zero_grad(set_to_none=True)
    return {"no_sync_grad_sum": total}


def _precision_round_trips(trainer: Trainer, saved: Any) -> bool:
    """Whether the precision state in the checkpoint, loaded into a new plugin, is the live plugin's state."""
    live = trainer.strategy.precision
    try:
        fresh = type(live)()
    except TypeError:  # a plugin whose constructor needs arguments is created by its registered factory
        fresh = PRECISIONS.create(live.name)
    fresh.connect(device_type=live.device_type)
    fresh.load_state_dict(saved if saved is not None else {})
    return same_value(fresh.state_dict(), live.state_dict())


def same_value(a: Any, b: Any) -> bool:
    """Deep equality of checkpoint-like values (tensors compared by value, on the CPU)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded tensor (DTensor) gathered whole; every rank must call it in the same order."""
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor


def _same_state(loaded: dict[str, Any], live: dict[str, Any]) -> bool:
    """Whether the loaded state equals the live one (full-layout strategies hold the state on rank 0 only)."""
    if not live:
        return False
    return loaded.keys() >= live.keys() and all(
        torch.equal(_full(loaded[k]).cpu(), _full(v.detach()).cpu()) for k, v in sorted(live.items()))


def main(argv: list[str]) -> int:
    settings = json.loads(argv[0])
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    seed_everything(settings.pop("seed", 0))
    steps = settings.pop("max_steps", 8)
    probe = Probe(out, max_steps=steps, no_backward_sync=settings.pop("probe_no_backward_sync", False))
    train, val = tiny_loaders(batch_size=settings.pop("batch_size", 16))
    trainer = Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, default_root_dir=str(out), num_sanity_val_steps=0,
                      callbacks=[probe], **settings)
    trainer.fit(TinyClassifier(), train, val)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

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
from xtrain.core.seed import seed_everything
from xtrain.core.testing.models import TinyClassifier, tiny_loaders
from xtrain.core.trainer import Trainer

__all__ = ["Probe", "main"]


class Probe(Callback):
    """Records what a conformance check asserts, on every rank, at the end of training."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.step_dtypes: dict[str, str] = {}

    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int) -> None:
        self.step_dtypes["input"] = str(batch[0].dtype)

    def on_train_end(self, trainer: Trainer, module: TrainModule) -> None:
        s = trainer.strategy
        rank, world = s.global_rank, s.world_size
        one = torch.tensor(float(rank + 1))
        params = torch.cat([_full(p.detach()).float().reshape(-1).cpu() for p in module.parameters()])
        ckpt = self.out / "probe.ckpt"
        trainer.save_checkpoint(ckpt)
        loaded = s.load_checkpoint(ckpt)  # a file, or a sharded directory read into this rank's shards
        record = {
            "rank": rank, "world_size": world, "local_rank": s.local_rank,
            "device_type": s.root_device.type, "losses": getattr(module, "losses", []),
            "global_step": trainer.global_step,
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
        }
        s.barrier("probe")
        (self.out / f"rank{rank}.json").write_text(json.dumps(record, default=str))


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
    train, val = tiny_loaders(batch_size=settings.pop("batch_size", 16))
    trainer = Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, default_root_dir=str(out), num_sanity_val_steps=0,
                      callbacks=[Probe(out)], **settings)
    trainer.fit(TinyClassifier(), train, val)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Train the docs' tiny transformer under ``model_parallel`` (or any strategy) and record what each rank saw.

    python mp_run.py '<json settings>'

Settings: ``out``, ``devices``, ``strategy`` (a name or ``"model_parallel"`` with ``mesh`` = ModelParallelStrategy
keyword arguments), ``steps``, ``batch_size`` (per data-parallel rank), ``meta`` (build the blocks in
configure_model), ``ckpt_path``, ``save`` (a path for ``trainer.save_checkpoint``), ``validate`` (run validation
every epoch), ``precision``, ``forget_plan`` (configure_model applies no tensor-parallel plan, only fully_shard: a
user's mistake the strategy must refuse).

Each rank writes ``rank<N>.json``: losses, full weights, the local shapes of its parameters, peak memory of its
parameters (bytes it holds locally) and the global step.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "docs" / "examples" / "model_parallel"))
from fsdp_run import full_params
from tiny_transformer import TinyTransformer, token_data

from xtrain.core import Callback, Trainer, TrainModule, seed_everything


def local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


class Model(TinyTransformer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.losses.append(float(self.trainer.strategy.reduce(loss.detach(), op="mean")))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        tokens, labels = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(tokens), labels), sync_dist=True)


class Record(Callback):
    def __init__(self, out: Path) -> None:
        self.out = out

    def on_fit_end(self, trainer: Trainer, module: TrainModule) -> None:  # also when a resumed run had no step left
        s = trainer.strategy
        params = full_params(module)
        shapes = {k: list(local(p.detach()).shape) for k, p in module.named_parameters()}
        held = sum(local(p.detach()).numel() * p.element_size() for p in module.parameters())
        record = {"rank": s.global_rank, "world_size": s.world_size, "global_step": trainer.global_step,
                  "losses": module.losses, "params": params, "local_shapes": shapes, "param_bytes": held,
                  "full_bytes": sum(len(v) * 4 for v in params.values()),
                  "param_types": sorted({type(p).__name__ for p in module.parameters()}), "compiles": len(COMPILES)}
        s.barrier("record")
        (self.out / f"rank{s.global_rank}.json").write_text(json.dumps(record))


COMPILES: list[int] = []


def counting_backend(name: str) -> Any:
    """A torch.compile backend that counts the graphs it compiles (each recompilation is one more)."""
    from torch._dynamo.backends.registry import lookup_backend

    real = lookup_backend(name)

    def backend(graph: Any, inputs: Any) -> Any:
        COMPILES.append(1)
        return real(graph, inputs)

    return backend


def strategy_of(settings: dict[str, Any]) -> Any:
    name = settings.get("strategy", "auto")
    if name == "model_parallel" and (settings.get("mesh") or settings.get("compile")):
        from xtrain.strategies import ModelParallelStrategy

        compiled: dict[str, Any] = {}
        if settings.get("compile"):
            compiled = {"compile": ["Block"], "compile_kwargs": {"backend": counting_backend(settings["compile"])}}
        return ModelParallelStrategy(**settings.get("mesh", {}), **compiled)
    return name


def main(settings: dict[str, Any]) -> None:
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # 4 ranks on few cores: no compile worker pools
    out = Path(settings["out"])
    out.mkdir(parents=True, exist_ok=True)
    seed_everything(0)
    torch.set_num_threads(1)
    data = token_data(samples=settings.get("samples", 32))
    loader = DataLoader(data, batch_size=settings.get("batch_size", 8))
    trainer = Trainer(accelerator="cpu", devices=settings.get("devices", 4), strategy=strategy_of(settings),
                      precision=settings.get("precision"), max_steps=settings.get("steps", 4), max_epochs=-1,
                      logger=False, enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, default_root_dir=str(out), num_sanity_val_steps=0,
                      limit_val_batches=2 if settings.get("validate") else 0,
                      val_check_interval=settings.get("val_every", 1.0), callbacks=[Record(out)])
    if settings.get("forget_plan"):
        import torch.distributed.tensor.parallel as tensor_parallel

        tensor_parallel.parallelize_module = lambda module, *args, **kwargs: module  # type: ignore[assignment]
    model = Model(build_in_configure_model=bool(settings.get("meta")))
    trainer.fit(model, loader, loader if settings.get("validate") else None, ckpt_path=settings.get("ckpt_path"))
    if settings.get("save"):
        trainer.save_checkpoint(settings["save"])


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

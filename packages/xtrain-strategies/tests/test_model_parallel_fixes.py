"""model_parallel on CPU meshes, in real gloo processes: meta-device init draws a proper sharded model (what one
process draws, not one shard copied to every rank), clipping by norm works across the tensor-parallel and
data-parallel meshes, and ``sync_dist`` metrics are reduced over the data-parallel ranks only.

This file is also the script its tests run (``python test_model_parallel_fixes.py '<json settings>'``):

- ``mode="trainer"``: the docs' tiny transformer under ``Trainer`` (``devices``, ``mesh`` = ModelParallelStrategy
  options, ``meta``, ``clip``/``clip_algorithm``, ``steps``, ``batch_size``); each rank writes ``rank<N>.json``.
- ``mode="materialize"``: no Trainer; a meta model sharded over a mesh by hand and materialized, ranks seeded
  differently (``seed + rank``); rank 0 writes the assembled weights.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples" / "model_parallel"
sys.path.insert(0, str(EXAMPLES))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_transformer import TinyTransformer, token_data  # noqa: E402

from xtrain.core import Callback, Trainer, TrainModule, seed_everything  # noqa: E402

TIMEOUT = 240.0
pytestmark = pytest.mark.timeout(900)  # each run is bounded by TIMEOUT too; this bounds the whole test
# Four processes on the CI's two cores take a minute a run: the 4-process cells run in `nox -s model_parallel`, the
# 2-process cells of the same fixes in the default set.
grid = pytest.mark.skipif(os.environ.get("XTRAIN_MODEL_PARALLEL_GRID") != "1",
                          reason="4-process model-parallel grid: runs in `nox -s model_parallel`")


# -- the worker ------------------------------------------------------------------------------------------------------
def full(tensor: torch.Tensor) -> torch.Tensor:
    gather = getattr(tensor, "full_tensor", None)
    return (gather() if callable(gather) else tensor).detach()


def full_params(module: nn.Module) -> dict[str, list[float]]:
    return {k: full(p).flatten().tolist() for k, p in module.named_parameters()}


class Model(TinyTransformer):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("n", float(batch[0].shape[0]), reduce_fx="sum", sync_dist=True, on_step=False, on_epoch=True)
        self.log("mean_loss", loss, sync_dist=True, on_step=False, on_epoch=True)
        return loss


class Record(Callback):
    def __init__(self, out: Path) -> None:
        self.out = out
        self.start: dict[str, list[float]] = {}

    def on_train_start(self, trainer: Trainer, module: TrainModule) -> None:
        self.start = full_params(module)

    def on_train_end(self, trainer: Trainer, module: TrainModule) -> None:
        record = {"rank": trainer.global_rank, "start": self.start, "params": full_params(module),
                  "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()}}
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


def train_main(settings: dict[str, Any]) -> None:
    out = Path(settings["out"])
    seed_everything(0)
    torch.set_num_threads(1)
    strategy: Any = "auto"
    if settings.get("mesh") is not None:
        from xtrain.strategies import ModelParallelStrategy

        strategy = ModelParallelStrategy(**settings["mesh"])
    trainer = Trainer(accelerator="cpu", devices=settings["devices"], strategy=strategy,
                      max_steps=settings.get("steps", 3), max_epochs=-1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False, default_root_dir=str(out),
                      num_sanity_val_steps=0, limit_val_batches=0, callbacks=[Record(out)],
                      gradient_clip_val=settings.get("clip"),
                      gradient_clip_algorithm=settings.get("clip_algorithm", "norm"))
    model = Model(build_in_configure_model=bool(settings.get("meta")))
    loader = torch.utils.data.DataLoader(token_data(samples=16 * settings.get("steps", 3)),
                                         batch_size=settings["batch_size"])
    trainer.fit(model, loader)


def small_model() -> nn.Sequential:
    """Odd sizes: FSDP's dim-0 shards are uneven (3 rows in 2: 2 and 1)."""
    return nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 3), nn.Embedding(5, 4))


def materialize_main(settings: dict[str, Any]) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from xtrain.strategies._internal.mesh import materialize

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tp = settings["tp"]
    mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(settings["seed"] + rank)  # unseeded ranks: every rank's generator differs
    with torch.device("meta"):
        model = small_model()
    if tp > 1:
        parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    if world // tp > 1:
        fully_shard(model, mesh=mesh["dp"])
    materialize(model, torch.device("cpu"))
    weights = {k: full(v).tolist() for k, v in model.state_dict().items()}
    local = {k: list(getattr(v, "to_local", lambda v=v: v)().shape) for k, v in model.state_dict().items()}
    if rank == 0:
        (Path(settings["out"]) / "weights.json").write_text(json.dumps({"weights": weights, "local": local}))
    dist.barrier()  # no rank tears the group down while another still gathers
    dist.destroy_process_group()
    # Skip the interpreter's finalization: gloo's worker threads can still hold work with tensors of this mesh, and
    # releasing them while Python shuts down aborts the process ('terminate called without an active exception',
    # a torch teardown race seen once in a local CI run, after everything this script checks had been written).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# -- running it ------------------------------------------------------------------------------------------------------
def run(out: Path, **settings: Any) -> list[dict[str, Any]]:
    from fsdp_helpers import run_script

    out.mkdir(parents=True, exist_ok=True)
    run_script(Path(__file__), json.dumps({**settings, "mode": "trainer", "out": str(out)}), cwd=out,
               timeout=TIMEOUT)
    records = sorted((json.loads(p.read_text()) for p in out.glob("rank*.json")), key=lambda r: r["rank"])
    assert len(records) == settings["devices"], "not every rank wrote a record"
    return records


def weights(params: dict[str, list[float]]) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v) for k, v in params.items()}


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), f"{sorted(a)} != {sorted(b)}"
    return max(float((a[k].flatten() - b[k].flatten()).abs().max()) for k in a)


def one_process_init() -> dict[str, torch.Tensor]:
    """The tiny transformer as one process draws it, seeded as the workers are."""
    with torch.random.fork_rng(devices=[]):
        seed_everything(0)
        model = TinyTransformer()
    return {k: p.detach().flatten() for k, p in model.named_parameters()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- 1. meta-device init on a CPU mesh -------------------------------------------------------------------------------
def test_meta_init_with_tensor_parallel_x_fsdp_draws_what_one_process_draws(tmp_path: Path) -> None:
    records = run(tmp_path / "meta", devices=4, mesh={"tensor_parallel": 2}, meta=True, steps=1, batch_size=8)
    start = weights(records[0]["start"])
    q = start["blocks.0.q.weight"].reshape(32, 32)
    # Four 8-row shards (2 tensor-parallel x 2 FSDP): before the fix every rank drew the same 8 rows.
    assert not any(torch.equal(q[0:8], q[i:i + 8]) for i in (8, 16, 24))
    assert max_difference(start, one_process_init()) == 0.0
    assert all(v == v for r in records for v in r["metrics"].values())  # and it trains


@pytest.mark.parametrize(("devices", "tp"), [(2, 1), (2, 2), pytest.param(4, 2, marks=grid)],
                         ids=["fsdp2", "tp2", "tp2xfsdp2"])
def test_materialize_on_a_cpu_mesh_slices_the_same_whole_init_on_every_rank(tmp_path: Path, devices: int,
                                                                          tp: int) -> None:
    from xtrain.core.testing import run_processes

    port = str(free_port())
    settings = json.dumps({"mode": "materialize", "out": str(tmp_path), "tp": tp, "seed": 7})
    envs = [{"RANK": str(r), "WORLD_SIZE": str(devices), "LOCAL_RANK": str(r), "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": port, "OMP_NUM_THREADS": "1"} for r in range(devices)]
    result = run_processes([[sys.executable, __file__, settings]] * devices, envs=envs, timeout=TIMEOUT,
                           cwd=tmp_path)
    result.check()
    record = json.loads((tmp_path / "weights.json").read_text())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)  # rank 0's seed: the ranks draw with rank 0's generator
        reference = small_model().state_dict()
    got = {k: torch.tensor(v) for k, v in record["weights"].items()}
    assert max_difference(got, {k: v.detach() for k, v in reference.items()}) == 0.0
    if devices // tp > 1:
        assert record["local"]["2.weight"] in ([2, 8], [1, 8], [2, 4], [1, 4])  # really sharded, unevenly


# -- 2. clipping under tensor parallelism ---------------------------------------------------------------------------
@pytest.mark.parametrize(("devices", "mesh", "batch_size"), [
    pytest.param(4, {"tensor_parallel": 2}, 8, marks=grid),  # tensor parallel 2 x FSDP 2
    (2, {"tensor_parallel": 2}, 16),  # tensor parallel only
], ids=["tp2xdp2", "tp2"])
def test_clipping_under_tensor_parallelism_trains_like_one_process(tmp_path: Path, devices: int,
                                                                   mesh: dict[str, Any], batch_size: int) -> None:
    unclipped = run(tmp_path / "unclipped", devices=1, batch_size=16)[0]
    for algorithm, clip in {"norm": 0.05, "value": 0.01}.items():
        reference = run(tmp_path / f"single_{algorithm}", devices=1, clip=clip, clip_algorithm=algorithm,
                        batch_size=16)[0]
        records = run(tmp_path / f"mp_{algorithm}", devices=devices, mesh=mesh, clip=clip,
                      clip_algorithm=algorithm, batch_size=batch_size)
        assert max_difference(weights(reference["params"]), weights(unclipped["params"])) > 1e-3  # clipping bites
        for record in records:
            assert max_difference(weights(record["params"]), weights(reference["params"])) < 1e-5, algorithm


def test_the_norm_across_meshes_is_clip_grad_norm_s_for_plain_tensors() -> None:
    from xtrain.strategies._internal.tp_clip import clip_grad_norm_across_meshes

    for norm_type in (2.0, 1.0, float("inf")):
        a = [nn.Parameter(torch.randn(5)) for _ in range(3)]
        b = [nn.Parameter(p.detach().clone()) for p in a]
        for p, q in zip(a, b, strict=True):
            p.grad = torch.randn(5)
            q.grad = p.grad.clone()
        expected = torch.nn.utils.clip_grad_norm_(a, 0.5, norm_type=norm_type)
        total = clip_grad_norm_across_meshes(b, 0.5, norm_type=norm_type)
        assert torch.allclose(total, expected)
        assert all(torch.allclose(p.grad, q.grad) for p, q in zip(a, b, strict=True))  # type: ignore[arg-type]


# -- 3. sync_dist metrics over the data-parallel ranks only ----------------------------------------------------------
@pytest.mark.parametrize(("devices", "batch_size"), [pytest.param(4, 8, marks=grid), (2, 16)],
                         ids=["tp2xdp2", "tp2"])
def test_summed_metrics_count_each_sample_once_under_tensor_parallelism(tmp_path: Path, devices: int,
                                                                       batch_size: int) -> None:
    reference = run(tmp_path / "single", devices=1, batch_size=16, steps=2)[0]
    records = run(tmp_path / "mp", devices=devices, mesh={"tensor_parallel": 2}, batch_size=batch_size, steps=2)
    for record in records:
        # Two steps of a global batch of 16: 32 samples, not 64 (once per tensor-parallel rank).
        assert record["metrics"]["n"] == reference["metrics"]["n"] == 32.0
        assert record["metrics"]["mean_loss"] == pytest.approx(reference["metrics"]["mean_loss"], abs=1e-5)


if __name__ == "__main__":
    options = json.loads(sys.argv[1])
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    (train_main if options["mode"] == "trainer" else materialize_main)(options)

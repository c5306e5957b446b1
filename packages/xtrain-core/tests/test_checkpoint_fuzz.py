"""Fuzzing the restore: a few hundred damaged copies of a real checkpoint (fixed seed), each either restored
identically or refused with a CheckpointError, never another exception and never a partial restore."""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from checkpoint_helpers import quiet_trainer, to_sharded, train_full
from xtrain.core import CheckpointError, Trainer
from xtrain.core._internal.checkpointing import restore_checkpoint
from xtrain.core.testing import TinyClassifier, tiny_loaders

FULL_TRIALS = 300
SHARDED_TRIALS = 60


class Adam(TinyClassifier):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=0.01)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1)}


def _leaves(state: Any) -> list[Any]:
    if isinstance(state, torch.Tensor):
        return [state.detach().clone()]
    if isinstance(state, dict):  # by key: a key restored by the optimizer's defaults lands last, same value
        return [(k, leaf) for k, v in sorted(state.items(), key=lambda kv: str(kv[0])) for leaf in _leaves(v)]
    if isinstance(state, (list, tuple)):
        return [leaf for v in state for leaf in _leaves(v)]
    return [state]


def _outcome(trainer: Trainer) -> list[Any]:
    """Everything a restore sets, flattened."""
    return _leaves({
        "module": trainer.strategy.module.state_dict(), "optimizers": [o.state_dict() for o in trainer.optimizers],
        "schedulers": [c.scheduler.state_dict() for c in trainer.lr_scheduler_configs],
        "loops": trainer._progress.state_dict(), "callbacks": [cb.state_dict() for cb in trainer.callbacks],
        "precision": trainer.strategy.precision.state_dict(), "rng": trainer._pending_rng,
        "sampler": trainer._pending_sampler})


def _equal(a: list[Any], b: list[Any]) -> bool:
    def same(x: Any, y: Any) -> bool:
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            return isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dtype == y.dtype and \
                x.shape == y.shape and bool(torch.equal(x, y))
        if isinstance(x, tuple) and isinstance(y, tuple):
            return len(x) == len(y) and all(same(i, j) for i, j in zip(x, y, strict=True))
        return bool(x == y)

    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))


def _paths(state: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(state, dict):
        found += [p for k, v in state.items() for p in _paths(v, (*prefix, k))]
    elif isinstance(state, list):
        found += [p for i, v in enumerate(state) for p in _paths(v, (*prefix, i))]
    return found


def _structural(rng: random.Random, checkpoint: dict[str, Any]) -> tuple[dict[str, Any], str]:
    path = rng.choice(_paths(checkpoint))
    parent = checkpoint
    for part in path[:-1]:
        parent = parent[part]
    kind = rng.choice(["drop", "retype", "reshape"])
    value = parent[path[-1]]
    if value is None and isinstance(parent, dict):
        kind = "drop"  # a None field has no type to retype against: drop it instead
    if kind == "drop" and _optional(path):
        kind = "retype"
    if kind == "drop" and isinstance(parent, dict):
        del parent[path[-1]]
    elif kind == "reshape" and isinstance(value, torch.Tensor) and value.numel() > 1:
        parent[path[-1]] = value.flatten()[:-1]
    else:  # a value of another kind: a number for a string, a tensor for a list... (not just another number)
        kind = "retype"
        parent[path[-1]] = rng.choice([v for v in ("x", None, [1], 2.5, {}, torch.zeros(2, dtype=torch.int64))
                                       if _kind(v) != _kind(value) and not _also_valid(path, value, v)])
    return checkpoint, f"{kind} {path}"


def _optional(path: tuple[Any, ...]) -> bool:
    """Entries a valid checkpoint may lack (it then restores differently, which the oracle cannot judge)."""
    return (path == ("sampler",)  # a run without xtrain's resumable sampler
            or (path[0] == "rng" and path[-1] in ("numpy", "cuda"))  # numpy never imported, no GPU
            or path[-2:-1] == ("state",)  # a parameter without optimizer state (an unused one)
            # a callback added later; a ModelCheckpoint tracking fewer files
            or (path[0] == "callbacks" and (len(path) == 2 or "best_k_models" in path or "recent" in path)))


def _also_valid(path: tuple[Any, ...], value: Any, replacement: Any) -> bool:
    """Replacements that make a valid checkpoint which restores as saved: not a damage the oracle could judge."""
    if path[0] in ("optimizer_states", "lr_schedulers") and isinstance(value, bool):
        return replacement is None  # torch's flags (foreach, fused, _is_initial...): None or a bool across versions
    if path[0] == "rng" and path[-2:] == ("python", 2):
        return replacement is None or _kind(replacement) == "number"  # Python's cached gauss: None or a float
    if path in (("sampler", "epoch_seed"), ("sampler",)):
        return replacement is None  # no epoch started yet; a run without xtrain's resumable sampler
    return False


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, (list, tuple)):
        return "sequence"
    return type(value).__name__


def _bytes(rng: random.Random, raw: bytes) -> tuple[bytes, str]:
    data = bytearray(raw)
    kind = rng.choice(["truncate", "flip", "overwrite", "insert"])
    at = rng.randrange(len(data))
    if kind == "truncate":
        return bytes(data[:at]), f"truncate at {at}"
    if kind == "flip":
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "overwrite":
        data[at:at + 16] = rng.randbytes(16)
    else:
        data[at:at] = rng.randbytes(rng.randint(1, 8))
    return bytes(data), f"{kind} at {at}"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("fuzz")
    genuine, _ = train_full(root / "a", module=Adam(), max_steps=3)
    baseline, _ = train_full(root / "b", module=Adam(), max_steps=1)
    trainer = quiet_trainer(root / "run", max_steps=1)
    trainer.fit(Adam(), tiny_loaders(n=64)[0])
    restore_checkpoint(trainer, trainer.strategy.load_checkpoint(genuine), str(genuine), fitting=True)
    reference = _outcome(trainer)
    return {"root": root, "genuine": genuine, "baseline": baseline, "trainer": trainer, "reference": reference,
            "sharded": to_sharded(genuine, root / "sharded.ckpt")}


def _first_difference(a: list[Any], b: list[Any]) -> str:
    for x, y in zip(a, b, strict=False):
        if not _equal([x], [y]):
            return f"{str(x)[:200]} vs {str(y)[:200]}"
    return f"{len(a)} vs {len(b)} leaves"


def _attempt(world: dict[str, Any], path: Path, mutation: str) -> str:
    trainer = world["trainer"]
    restore_checkpoint(trainer, trainer.strategy.load_checkpoint(world["baseline"]), "baseline", fitting=True)
    before = _outcome(trainer)
    try:
        restore_checkpoint(trainer, trainer.strategy.load_checkpoint(path), str(path), fitting=True)
    except CheckpointError as err:
        after = _outcome(trainer)
        assert _equal(after, before), f"{mutation}: a failed restore changed {_first_difference(after, before)} ({err})"
        return "refused"
    after = _outcome(trainer)
    assert _equal(after, world["reference"]), f"{mutation}: restored, but {_first_difference(after, world['reference'])}"
    return "restored"


def test_damaged_full_checkpoints_restore_identically_or_are_refused(world: dict[str, Any], tmp_path: Path) -> None:
    rng = random.Random(1234)
    raw = world["genuine"].read_bytes()
    outcomes: dict[str, int] = {}
    start = time.perf_counter()
    for trial in range(FULL_TRIALS):
        path = tmp_path / f"trial-{trial}.ckpt"
        if rng.random() < 0.5:
            damaged, mutation = _bytes(rng, raw)
            path.write_bytes(damaged)
        else:
            edited, mutation = _structural(rng, torch.load(world["genuine"], weights_only=True))
            torch.save(edited, path)
        result = _attempt(world, path, mutation)
        outcomes[result] = outcomes.get(result, 0) + 1
        path.unlink()
    assert outcomes.get("refused", 0) > FULL_TRIALS // 2, outcomes
    assert time.perf_counter() - start < 120


def test_damaged_sharded_checkpoints_restore_identically_or_are_refused(world: dict[str, Any],
                                                                        tmp_path: Path) -> None:
    rng = random.Random(4321)
    outcomes: dict[str, int] = {}
    for trial in range(SHARDED_TRIALS):
        path = tmp_path / f"trial-{trial}.ckpt"
        shutil.copytree(world["sharded"], path)
        files = sorted(p for p in path.rglob("*") if p.is_file())
        victim = rng.choice(files)
        damaged, mutation = _bytes(rng, victim.read_bytes())
        victim.write_bytes(damaged)
        result = _attempt(world, path, f"{victim.name}: {mutation}")
        outcomes[result] = outcomes.get(result, 0) + 1
        shutil.rmtree(path)
    assert outcomes.get("refused", 0) > SHARDED_TRIALS // 2, outcomes

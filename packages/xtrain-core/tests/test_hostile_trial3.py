"""Found by a third outside trial with hostile files: values that passed the restore's checks and then failed, after
the weights were replaced, at the first optimizer step or the first checkpoint save, with a raw torch or Python error.
Each is now a CheckpointError naming the file, and nothing is loaded."""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from checkpoint_helpers import quiet_trainer
from xtrain.core import CheckpointError, Engine, ModelCheckpoint, seed_everything
from xtrain.core._internal.optimizer_plan import optimizer_problems
from xtrain.core.testing import TinyClassifier, tiny_loaders


class AdamClassifier(TinyClassifier):
    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01)


@pytest.fixture(scope="module")
def adam_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("adam")
    seed_everything(3)
    quiet_trainer(root, max_steps=2).fit(AdamClassifier(), tiny_loaders(n=64)[0])
    return root / "checkpoints" / "last.ckpt"


def _edited(source: Path, target: Path, edit: Any) -> Path:
    checkpoint = torch.load(source, weights_only=True)
    edit(checkpoint)
    torch.save(checkpoint, target)
    return target


def _every_state(checkpoint: dict[str, Any], **fields: Any) -> None:
    for entry in checkpoint["optimizer_states"][0]["state"].values():
        entry.update(fields)


OPTIMIZER_CASES = {
    "step a vector": (lambda c: _every_state(c, step=torch.zeros(3)), r"\.step: a tensor of shape \(3,\), not one count"),
    "amsgrad without its buffer": (
        lambda c: c["optimizer_states"][0]["param_groups"][0].update(amsgrad=True),
        r"group 0: amsgrad=True, but the state of .* has no 'max_exp_avg_sq'"),
    "parameters neither names nor indices": (
        lambda c: c["optimizer_states"][0]["param_groups"][0].update(params=[[0]] * 4),
        r"group\(s\) \[0\] list parameters that are neither names nor indices"),
    "capturable on the CPU": (
        lambda c: c["optimizer_states"][0]["param_groups"][0].update(capturable=True),
        r"group 0: capturable=True, which torch's optimizers refuse for parameters on cpu"),
}


@pytest.mark.parametrize("case", sorted(OPTIMIZER_CASES))
def test_an_optimizer_state_that_would_fail_the_next_step_is_refused(case: str, adam_checkpoint: Path,
                                                                     tmp_path: Path) -> None:
    edit, expected = OPTIMIZER_CASES[case]
    path = _edited(adam_checkpoint, tmp_path / "edited.ckpt", edit)
    module = AdamClassifier()
    before = copy.deepcopy(module.state_dict())
    with pytest.raises(CheckpointError, match=expected) as info:
        quiet_trainer(tmp_path, max_steps=4).fit(module, tiny_loaders(n=32)[0], ckpt_path=path)
    assert str(path) in str(info.value) and "nothing was loaded" in str(info.value)
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items()), "weights were loaded"
    assert module.losses == [], "training started"


@pytest.mark.parametrize("case", sorted(OPTIMIZER_CASES))
def test_engine_load_refuses_the_same_optimizer_states(case: str, adam_checkpoint: Path, tmp_path: Path) -> None:
    edit, expected = OPTIMIZER_CASES[case]
    checkpoint = torch.load(adam_checkpoint, weights_only=True)
    edit(checkpoint)
    source = TinyClassifier()
    torch.save({"model": checkpoint["state_dict"], "optimizer": checkpoint["optimizer_states"][0]},
               tmp_path / "engine.ckpt")
    engine = Engine(accelerator="cpu", devices=1)
    engine.launch()
    model, opt = engine.setup(source, torch.optim.Adam(source.parameters(), lr=0.01))
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(CheckpointError, match=expected):
        engine.load(tmp_path / "engine.ckpt", {"model": model, "optimizer": opt})
    assert not opt.state and opt.param_groups[0]["amsgrad"] is False and opt.param_groups[0]["capturable"] is False
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), "weights were loaded"


def test_a_genuine_adam_checkpoint_still_resumes(adam_checkpoint: Path, tmp_path: Path) -> None:
    """The new checks refuse only what torch cannot step with: the file they were tried on loads and trains."""
    module = AdamClassifier()
    trainer = quiet_trainer(tmp_path, max_steps=4)
    trainer.fit(module, tiny_loaders(n=64)[0], ckpt_path=adam_checkpoint)
    assert trainer.global_step == 4 and len(module.losses) == 2


def _checkpoint_state(checkpoint: dict[str, Any]) -> dict[str, Any]:
    return next(v for k, v in checkpoint["callbacks"].items() if k.startswith("ModelCheckpoint"))


RANKING_CASES = {
    "a score that is a string": (lambda s: s["best_k_models"].update({next(iter(s["best_k_models"])): "x"}),
                                 r"best_k_models\[.*\] is a str, not a score"),
    "a score that is a vector": (lambda s: s["best_k_models"].update(
        {next(iter(s["best_k_models"])): torch.tensor([1.0, 2.0])}), r"is a tensor of shape \(2,\), not a score"),
    "a NaN best score": (lambda s: s.update(best_model_score=float("nan")), "best_model_score is NaN"),
    "a path that is a number": (lambda s: s.update(best_model_path=3), r"best_model_path.? (is )?a int"),
    "the ranking a list": (lambda s: s.update(best_k_models=[1.0]), r"best_k_models.? (is )?a list"),
}


@pytest.fixture(scope="module")
def ranked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ranked")
    seed_everything(3)
    train, val = tiny_loaders(n=64)
    callback = ModelCheckpoint(dirpath=root / "ckpt", monitor="val_loss", save_top_k=2, save_last=True)
    quiet_trainer(root, max_steps=4, max_epochs=2, callbacks=[callback]).fit(TinyClassifier(), train, val)
    assert callback.best_k_models, "the run ranked no checkpoint"
    return root / "ckpt" / "last.ckpt"


@pytest.mark.parametrize("case", sorted(RANKING_CASES))
def test_a_model_checkpoint_ranking_of_another_kind_is_refused_at_the_restore(case: str, ranked: Path,
                                                                              tmp_path: Path) -> None:
    edit, expected = RANKING_CASES[case]
    path = _edited(ranked, tmp_path / "edited.ckpt", lambda c: edit(_checkpoint_state(c)))
    module = TinyClassifier()
    before = copy.deepcopy(module.state_dict())
    callback = ModelCheckpoint(dirpath=ranked.parent, monitor="val_loss", save_top_k=2, save_last=True)
    train, val = tiny_loaders(n=64)
    with pytest.raises(CheckpointError, match=expected) as info:
        quiet_trainer(tmp_path, max_steps=8, max_epochs=4, callbacks=[callback]).fit(module, train, val,
                                                                                     ckpt_path=path)
    assert str(path) in str(info.value) and "nothing was loaded" in str(info.value), info.value
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items()), "weights were loaded"
    assert callback.best_k_models == {} and callback.best_model_path == ""


def test_lightning_tensor_scores_are_read_as_numbers(ranked: Path, tmp_path: Path) -> None:
    """Lightning's ModelCheckpoint keeps its scores as 0-d tensors; such a ranking restores as floats."""
    def as_tensors(state: dict[str, Any]) -> None:
        state["best_k_models"] = {k: torch.tensor(v) for k, v in state["best_k_models"].items()}
        state["best_model_score"] = torch.tensor(state["best_model_score"])

    path = _edited(ranked, tmp_path / "tensors.ckpt", lambda c: as_tensors(_checkpoint_state(c)))
    saved = _checkpoint_state(torch.load(ranked, weights_only=True))
    callback = ModelCheckpoint(dirpath=ranked.parent, monitor="val_loss", save_top_k=2)
    callback.load_state_dict(_checkpoint_state(torch.load(path, weights_only=True)))
    assert callback.best_k_models == saved["best_k_models"]
    assert all(type(v) is float for v in callback.best_k_models.values())
    assert callback.best_model_score is not None and callback.best_model_score.item() == saved["best_model_score"]


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(11)
    if choice == 0:
        return rng.choice([None, True, False, -3, 0, 7, 0.1, -1.0, math.nan, math.inf, "x", b"bytes", (0.9, 0.999)])
    if choice in (1, 2):
        return torch.randn(rng.choice([(), (3,), (4, 3), (2, 2, 2)]))
    if choice == 3 and depth < 2:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    if choice == 4 and depth < 2:
        return {_random_key(rng): _random_value(rng, depth + 1) for _ in range(rng.randrange(3))}
    return rng.choice([0, 1.5, "lr", torch.tensor(3.0)])


def _random_key(rng: random.Random) -> Any:
    return rng.choice(["lr", "betas", "step", "exp_avg", "momentum_buffer", "params", "amsgrad", "capturable", 0, 1,
                       "0.weight", 2.5, None, True])


def test_random_optimizer_states_are_problems_never_raw_errors() -> None:
    """2,000 seeded mutations of real Adam/SGD/AdamW states (hyperparameters, per-parameter fields, state keys,
    parameter ids): the plan lists problems and never raises (a raw TypeError escaped Engine.load for unhashable
    parameter ids, and for non-string keys in a message or a sort)."""
    rng = random.Random(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    named = {id(p): n for n, p in model.named_parameters()}
    optimizers = [torch.optim.Adam(model.parameters()), torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                  torch.optim.AdamW(model.parameters(), amsgrad=True)]
    for optimizer in optimizers:
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        optimizer.step()
    flagged = 0
    for _ in range(2000):
        optimizer = rng.choice(optimizers)
        saved = optimizer.state_dict()
        state = {"state": {k: dict(v) for k, v in saved["state"].items()},
                 "param_groups": [dict(g, params=list(g["params"])) for g in saved["param_groups"]]}
        for _ in range(rng.randrange(1, 4)):
            where, group = rng.randrange(4), rng.choice(state["param_groups"])
            entries = [v for v in state["state"].values() if isinstance(v, dict)]
            if where == 0:
                group[_random_key(rng)] = _random_value(rng)
            elif where == 1 and entries:
                rng.choice(entries)[_random_key(rng)] = _random_value(rng)
            elif where == 2:
                state["state"][_random_key(rng)] = _random_value(rng)
            elif isinstance(group.get("params"), list) and group["params"]:
                group["params"][rng.randrange(len(group["params"]))] = _random_key(rng)
        flagged += bool(optimizer_problems("optimizer_states[0]", state, optimizer, named))
    assert flagged > 1000, "the mutations were mostly harmless: the test no longer exercises the checks"


"""A resumed ModelCheckpoint state names only files the callback writes: pruning never deletes a user's file beside
the checkpoints, and ``ckpt_path="best"`` never loads one, while the run's own earlier files are pruned as before."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from checkpoint_helpers import quiet_trainer
from xtrain.core import ConfigError, ModelCheckpoint, Trainer
from xtrain.core.defaults.torch_io import save_file
from xtrain.core.testing import TinyClassifier, tiny_loaders

_KEPT = "kept \\(never deleted\\)"


class _Scripted(TinyClassifier):
    """A ``val_loss`` known in advance, so the ranking across the resume is too."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", [0.5, 0.4, 0.3][self.current_epoch])


def _trainer(root: Path, epochs: int, callback: ModelCheckpoint | None = None, **options: Any) -> Trainer:
    return quiet_trainer(root, max_epochs=epochs, max_steps=-1, limit_train_batches=2, num_sanity_val_steps=0,
                         callbacks=[callback] if callback is not None else None, **options)


def _planted(source: Path, target: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """``source`` with its ModelCheckpoint state changed by ``edit``: what a downloaded checkpoint may hold."""
    checkpoint = torch.load(source, weights_only=True)
    edit(next(v for k, v in checkpoint["callbacks"].items() if k.startswith("ModelCheckpoint")))
    save_file(checkpoint, target)
    return target


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _resume_with_a_planted_file(tmp_path: Path, victim: Path, field: str, score: float, callback: ModelCheckpoint,
                                module: TinyClassifier, *loaders: Any) -> None:
    """Write a user's file ``victim`` beside the checkpoints, name it in the ``field`` ranking of ``last.ckpt``'s
    ModelCheckpoint state (a downloaded copy), and resume 2 epochs from that copy with ``callback``: the resume must
    warn that the file is kept, and the file must be unchanged."""
    victim.write_text("the user's own file")
    resumed = _planted(victim.parent / "last.ckpt", tmp_path / "downloaded.ckpt",
                       lambda state: state[field].update({str(victim): score}))
    with pytest.warns(UserWarning, match=f"{re.escape(repr(str(victim)))}.*{_KEPT}"):
        _trainer(tmp_path, 2, callback).fit(module, *loaders, ckpt_path=resumed)
    assert victim.read_text() == "the user's own file"


def test_a_planted_ranking_never_deletes_a_user_file_beside_the_checkpoints(tmp_path: Path) -> None:
    ckpts, train = tmp_path / "ckpts", tiny_loaders()[0]
    _trainer(tmp_path, 1, ModelCheckpoint(dirpath=ckpts, save_last=True)).fit(TinyClassifier(), train)
    _resume_with_a_planted_file(tmp_path, ckpts / "my_pretrained_backbone.ckpt", "recent", -1.0,
                                ModelCheckpoint(dirpath=ckpts, save_last=True), TinyClassifier(), train)
    assert _names(ckpts) == ["epoch=1-step=4.ckpt", "last.ckpt", "my_pretrained_backbone.ckpt"]


def test_a_resume_still_prunes_the_earlier_runs_own_files(tmp_path: Path) -> None:
    ckpts, train = tmp_path / "ckpts", tiny_loaders()[0]
    _trainer(tmp_path, 1, ModelCheckpoint(dirpath=ckpts, save_last=True)).fit(TinyClassifier(), train)
    callback = ModelCheckpoint(dirpath=ckpts, save_last=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(tmp_path, 2, callback).fit(TinyClassifier(), train, ckpt_path="last")
    assert not [w for w in caught if "never deleted" in str(w.message)]
    assert _names(ckpts) == ["epoch=1-step=4.ckpt", "last.ckpt"], "save_top_k=1 across the resume"
    assert callback.best_model_path == str(ckpts / "epoch=1-step=4.ckpt")


@pytest.mark.parametrize("origin", ["Lightning", "older xtrain"])
def test_rankings_of_lightning_and_older_xtrain_still_prune_their_files(tmp_path: Path, origin: str) -> None:
    ckpts, (train, val) = tmp_path / "ckpts", tiny_loaders()
    ckpts.mkdir()
    earlier = ckpts / "epoch=7-step=100.ckpt"
    earlier.write_text("an earlier run's checkpoint")
    if origin == "Lightning":  # its scores are tensors; it has no "recent"
        callback = ModelCheckpoint(dirpath=ckpts, monitor="val_loss")
        state: dict[str, Any] = {"monitor": "val_loss", "best_k_models": {str(earlier): torch.tensor(0.9)},
                                 "best_model_path": str(earlier), "best_model_score": torch.tensor(0.9),
                                 "kth_best_model_path": str(earlier), "kth_value": torch.tensor(0.9),
                                 "last_model_path": "", "current_score": torch.tensor(0.9), "dirpath": str(ckpts)}
    else:  # before "recent", best_k_models held the ranking without a monitor
        callback = ModelCheckpoint(dirpath=ckpts)
        state = {"monitor": None, "best_k_models": {str(earlier): 1.0}, "best_model_path": str(earlier)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        callback.load_state_dict(state)
        _trainer(tmp_path, 1, callback).fit(_Scripted(), train, val)
    assert not [w for w in caught if "never deleted" in str(w.message)]
    assert _names(ckpts) == ["epoch=0-step=2.ckpt"]


def test_a_custom_template_with_a_monitor_prunes_its_own_files_only(tmp_path: Path) -> None:
    ckpts, (train, val) = tmp_path / "ckpts", tiny_loaders()

    def callback() -> ModelCheckpoint:
        return ModelCheckpoint(dirpath=ckpts, filename="{epoch}-{val_loss:.2f}", monitor="val_loss", save_last=True)

    _trainer(tmp_path, 1, callback()).fit(_Scripted(), train, val)
    assert _names(ckpts) == ["epoch=0-val_loss=0.50.ckpt", "last.ckpt"]
    second = callback()
    _resume_with_a_planted_file(tmp_path, ckpts / "backbone.ckpt", "best_k_models", 9.0, second, _Scripted(),
                                train, val)
    assert _names(ckpts) == ["backbone.ckpt", "epoch=1-val_loss=0.40.ckpt", "last.ckpt"]
    assert second.best_k_models == {str(ckpts / "epoch=1-val_loss=0.40.ckpt"): pytest.approx(0.4)}


def test_a_versioned_name_is_pruned_and_a_look_alike_is_not(tmp_path: Path) -> None:
    ckpts, train = tmp_path / "ckpts", tiny_loaders()[0]
    ckpts.mkdir()
    (ckpts / "epoch=0-step=2.ckpt").write_text("a file of the same name the run did not write")
    _trainer(tmp_path, 1, ModelCheckpoint(dirpath=ckpts, save_last=True)).fit(TinyClassifier(), train)
    assert (ckpts / "epoch=0-step=2-v1.ckpt").exists()
    _resume_with_a_planted_file(tmp_path, ckpts / "epoch0.ckpt", "recent", -1.0,
                                ModelCheckpoint(dirpath=ckpts, save_last=True), TinyClassifier(), train)
    assert _names(ckpts) == ["epoch0.ckpt", "epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "last.ckpt"]


@pytest.mark.parametrize("where", ["outside", "beside"])
def test_a_restored_best_path_the_callback_did_not_write_is_never_loaded(tmp_path: Path, where: str) -> None:
    train, val = tiny_loaders(n=64)
    Trainer(accelerator="cpu", max_steps=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
            default_root_dir=tmp_path).fit(TinyClassifier(), train)
    genuine = next((tmp_path / "checkpoints").glob("epoch=*.ckpt"))
    checkpoint = torch.load(genuine, weights_only=True)
    planted = (tmp_path / "elsewhere" if where == "outside" else tmp_path / "checkpoints") / "attacker.ckpt"
    planted.parent.mkdir(exist_ok=True)
    save_file({**checkpoint, "state_dict": {k: torch.full_like(v, 7.0) for k, v in checkpoint["state_dict"].items()}},
              planted)
    resumed = _planted(genuine, tmp_path / "downloaded.ckpt", lambda state: state.update(best_model_path=str(planted)))
    trainer = Trainer(accelerator="cpu", max_steps=2, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    module = TinyClassifier()
    with pytest.warns(UserWarning, match=f"{re.escape(repr(str(planted)))}.*not used as the best"):
        trainer.fit(module, train, ckpt_path=resumed)  # at step 2 already: the fit saves nothing more
    assert trainer.checkpoint_callback is not None and trainer.checkpoint_callback.best_model_path == ""
    try:
        trainer.test(ckpt_path="best", dataloaders=val, verbose=False)
    except ConfigError:
        pass  # no best checkpoint at all is fine too; loading the planted one is not
    assert not all(bool((v == 7.0).all()) for v in module.state_dict().values())
    assert planted.exists()


def _sevens(source: Path, target: Path) -> Path:
    """A well-formed checkpoint of other weights (every value 7) at ``target``: a file the run did not write."""
    checkpoint = torch.load(source, weights_only=True)
    save_file({**checkpoint, "state_dict": {k: torch.full_like(v, 7.0) for k, v in checkpoint["state_dict"].items()}},
              target)
    return target


def _best_of_a_new_trainer(root: Path, ckpts: Path) -> tuple[TinyClassifier, str]:
    module = TinyClassifier()
    trainer = _trainer(root, 1, ModelCheckpoint(dirpath=ckpts, monitor="val_loss", save_last=True))
    with pytest.raises(ConfigError, match="ckpt_path='best': there is no best checkpoint") as raised:
        trainer.test(module, tiny_loaders(n=64)[1], ckpt_path="best", verbose=False)
    return module, str(raised.value)


@pytest.mark.parametrize("last", ["kept", "removed"])
def test_a_new_trainer_never_loads_a_user_file_as_best(tmp_path: Path, last: str) -> None:
    """``ckpt_path="best"`` in a new process reads the best path from the run's ``last`` file. A ``last`` whose
    state names a user's file beside the checkpoints, or (without a ``last``) a user's file holding a state that
    names itself, must not make that file the best."""
    ckpts, (train, val) = tmp_path / "ckpts", tiny_loaders(n=64)
    _trainer(tmp_path, 1, ModelCheckpoint(dirpath=ckpts, monitor="val_loss", save_last=True)).fit(
        TinyClassifier(), train, val)
    genuine = next(ckpts.glob("epoch=*.ckpt"))
    backbone = _sevens(genuine, ckpts / "backbone.ckpt")
    _planted(ckpts / "last.ckpt", ckpts / "last.ckpt" if last == "kept" else backbone,
             lambda state: state.update(best_model_path=str(backbone)))
    if last == "removed":
        genuine.unlink()
        (ckpts / "last.ckpt").unlink()
    module, message = _best_of_a_new_trainer(tmp_path, ckpts)
    assert not any(bool((v == 7.0).all()) for v in module.state_dict().values())
    assert backbone.exists()
    if last == "kept":  # the error says which file named which best, and why that one was not taken
        assert f"{str(ckpts / 'last.ckpt')!r} names {str(backbone)!r} as the best, which is not a file" in message
        assert "pass a checkpoint's path" in message
    else:  # a user's file holding a state is not read at all
        assert "Passed over" not in message


def test_a_best_that_was_deleted_is_named_in_the_error(tmp_path: Path) -> None:
    """The run's own best file, deleted since: ``ckpt_path="best"`` in a new process says which ``last`` named it."""
    ckpts, (train, val) = tmp_path / "ckpts", tiny_loaders(n=64)
    _trainer(tmp_path, 1, ModelCheckpoint(dirpath=ckpts, monitor="val_loss", save_last=True)).fit(
        TinyClassifier(), train, val)
    best = next(ckpts.glob("epoch=*.ckpt"))
    best.unlink()
    _, message = _best_of_a_new_trainer(tmp_path, ckpts)
    assert f"{str(ckpts / 'last.ckpt')!r} names {str(best)!r} as the best, which no longer exists" in message


def test_a_new_trainer_still_finds_the_runs_own_best(tmp_path: Path) -> None:
    """The check above keeps the common case: the best that ``last`` names is the run's own file, in a folder that
    also holds a user's file."""
    ckpts, (train, val) = tmp_path / "ckpts", tiny_loaders(n=64)
    first = _trainer(tmp_path, 2, ModelCheckpoint(dirpath=ckpts, monitor="val_loss", save_last=True))
    first.fit(_Scripted(), train, val)
    _sevens(ckpts / "last.ckpt", ckpts / "backbone.ckpt")
    fresh = _trainer(tmp_path, 1, ModelCheckpoint(dirpath=ckpts, monitor="val_loss", save_last=True))
    from xtrain.core._internal.checkpointing import find_checkpoint

    assert first.checkpoint_callback is not None
    assert find_checkpoint(fresh, "best") == first.checkpoint_callback.best_model_path != ""


def test_a_bare_epoch_template_without_metric_names_still_tells_a_user_file_apart(tmp_path: Path) -> None:
    """``filename="{epoch}"`` with ``auto_insert_metric_name=False`` writes ``0.ckpt``, ``1.ckpt``: digits only, so a
    planted ranking naming ``backbone.ckpt`` beside them does not get it deleted, while ``0.ckpt`` is pruned."""
    ckpts, train = tmp_path / "ckpts", tiny_loaders()[0]

    def callback() -> ModelCheckpoint:
        return ModelCheckpoint(dirpath=ckpts, filename="{epoch}", auto_insert_metric_name=False, save_last=True)

    _trainer(tmp_path, 1, callback()).fit(TinyClassifier(), train)
    _resume_with_a_planted_file(tmp_path, ckpts / "backbone.ckpt", "recent", -1.0, callback(), TinyClassifier(),
                                train)
    assert _names(ckpts) == ["1.ckpt", "backbone.ckpt", "last.ckpt"]

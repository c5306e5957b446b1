"""Checkpoints written by Lightning: recognised, so that what can be used is used and messages give fixes that work.

A Lightning ``.ckpt`` file is read like any other (``weights_only=True``, through the checkpoint gate). Its weights
serve ``validate``/``test``/``predict(ckpt_path=...)`` as they do in Lightning (the module's weights after its
``on_load_checkpoint``, and the data module's state, which Lightning keeps under the data module's class name);
``fit`` cannot resume from it (its optimizer and loop states are Lightning's), which ``restore_apply`` says. Lightning's
sharded directories (FSDP, DeepSpeed) are consolidated with Lightning's own tools, which the messages name.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from xtrain.core.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["lightning_directory", "lightning_version", "restore_lightning_weights"]


def lightning_version(checkpoint: dict[str, Any]) -> str | None:
    """The Lightning version that wrote ``checkpoint`` (at most 40 characters); ``None`` when Lightning did not."""
    if "pytorch-lightning_version" not in checkpoint or not isinstance(checkpoint.get("state_dict"), dict):
        return None
    return str(checkpoint["pytorch-lightning_version"])[:40]


def restore_lightning_weights(trainer: Trainer, checkpoint: dict[str, Any], path: str) -> None:
    """``validate``/``test``/``predict`` from a Lightning file: as Lightning, the module's ``on_load_checkpoint``, then
    its weights and the data module's state, all or nothing; nothing else in the file is read."""
    from xtrain.core._internal.restore_apply import apply_with_rollback, extra_states, load_weights, strict_loading
    from xtrain.core._internal.restore_plan import STRICT_LOADING_FIX, RestorePlan, only_lacks_weights

    datamodule = trainer.datamodule
    # Lightning keeps the data module's state under its class's name
    datamodule_state = None if datamodule is None else checkpoint.get(type(datamodule).__qualname__)
    rank_zero_info(f"ckpt_path={path!r}: a checkpoint written by Lightning {lightning_version(checkpoint)}; loading "
                   f"the module's weights" + ("" if datamodule_state is None else " and the datamodule's state"))
    trainer._hooks.call_module_first("on_load_checkpoint", checkpoint)
    state = checkpoint["state_dict"]
    module = trainer.strategy.module
    plan = RestorePlan(path)
    plan.module(state, module, strict=strict_loading(trainer))
    targets = extra_states(module, state)
    if datamodule is not None and datamodule_state is not None:
        plan.like("the datamodule", datamodule_state, datamodule.state_dict())
        targets.append(("the datamodule", datamodule, datamodule_state))
    if plan.problems and strict_loading(trainer) and only_lacks_weights(state, module):
        plan.fixes.append(STRICT_LOADING_FIX)
    elif plan.problems:
        plan.fixes.append("build the model with the hyperparameters it was trained with: "
                          "model = MyModule.load_from_checkpoint(path) does, then call the stage without ckpt_path.")
    plan.check()
    load_weights(trainer, state, path, apply_with_rollback(path, targets))


def lightning_directory(path: Path) -> str | None:
    """How to load a sharded checkpoint directory Lightning wrote (FSDP or DeepSpeed); ``None`` for any other."""
    if (path / "meta.pt").is_file() and (path / ".metadata").is_file():
        return (f"{str(path)!r} is a sharded checkpoint written by Lightning's FSDP strategy (meta.pt and .metadata). "
                f"Consolidate it with Lightning, where it is installed: python -m "
                f"lightning.pytorch.utilities.consolidate_checkpoint '{path}' (writes '{path}.consolidated'), then "
                f"load that file with MyModule.load_from_checkpoint or pass it as ckpt_path to validate/test/predict.")
    if (path / "latest").is_file() or any(path.glob("*/mp_rank_*_model_states.pt")):
        return (f"{str(path)!r} is a checkpoint written by DeepSpeed (Lightning's DeepSpeed strategy). Convert it with "
                f"Lightning, where it is installed: python -c \"from lightning.pytorch.utilities.deepspeed import "
                f"convert_zero_checkpoint_to_fp32_state_dict as c; c('{path}', '{path}.full.ckpt')\", then load "
                f"'{path}.full.ckpt' with MyModule.load_from_checkpoint or pass it as ckpt_path to "
                f"validate/test/predict.")
    return None

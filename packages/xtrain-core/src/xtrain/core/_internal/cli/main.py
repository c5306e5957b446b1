"""``xtrain fit|validate|test|predict`` on jsonargparse, the library LightningCLI uses.

The model and datamodule are chosen by ``class_path``/``init_args``; every Trainer argument is an option
(``--trainer.strategy ddp``) that accepts any registered name, third-party ones included; ``--optimizer`` and
``--lr_scheduler`` pick torch classes; ``--config`` files (repeatable) are merged in order; ``--print_config`` shows
the resolved configuration, which is also saved beside the run's logs as ``config.yaml``.

The directory of each ``--config`` file and the working directory are put on ``sys.path`` (last, so they never replace
a module of the standard library or an installed package), so a model defined next to its config is found by its
module name.
"""

from __future__ import annotations

import os
import sys
from argparse import ArgumentError
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xtrain.core._internal.cli.links import InstantiationLink, build_in_order

__all__ = ["build_objects", "run"]

_STAGES = ("fit", "validate", "test", "predict")
_DESCRIPTION = "Train, validate, test or predict with a TrainModule, configured from the command line or YAML."


def _config_dirs(argv: list[str]) -> list[str]:
    found = []
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--config=") else (
            argv[i + 1] if arg in ("--config", "-c") and i + 1 < len(argv) else None)
        if value:
            found.append(str(Path(value).resolve().parent))
    return found


def _stage_parser(stage: str, *, model_class: type | None = None, data_class: type | None = None,
                  subclass_mode_model: bool = False, subclass_mode_data: bool = False,
                  trainer_class: type | None = None, seed_default: int | bool = True, **parser_kwargs: Any) -> Any:
    """The parser of one stage. With a ``model_class`` (``XtrainCLI``), its arguments are options of their own
    (``--model.lr``) unless ``subclass_mode_model`` asks for a ``class_path``; the same for ``data_class``."""
    import torch
    from jsonargparse import ActionConfigFile, ArgumentParser

    from xtrain.core._internal.cli.known_classes import import_public_classes
    from xtrain.core._internal.cli.strict_yaml import PARSER_MODE
    from xtrain.core.datamodule import DataModule
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

    import_public_classes()
    parser = ArgumentParser(**{"description": f"xtrain {stage}", "exit_on_error": False, "allow_abbrev": False,
                               "parser_mode": PARSER_MODE, **parser_kwargs})
    parser.add_argument("-c", "--config", action=ActionConfigFile,
                        help="A YAML config; repeat to merge several in order.")
    parser.add_argument("--seed_everything", type=int | bool, default=seed_default,
                        help="Seed every generator: an int, True for a random seed (recorded), or False.")
    parser.add_class_arguments(trainer_class or Trainer, "trainer", fail_untyped=False, instantiate=False)
    if model_class is not None and not subclass_mode_model:
        parser.add_class_arguments(model_class, "model", fail_untyped=False, instantiate=False)
    else:
        parser.add_subclass_arguments(model_class or TrainModule, "model", required=True)
    if data_class is not None and not subclass_mode_data:
        parser.add_class_arguments(data_class, "data", fail_untyped=False, instantiate=False)
    else:
        parser.add_subclass_arguments(data_class or DataModule, "data", required=False)
    # Every stage takes them, so that fit's config (and the config.yaml it saves) serves test, validate and predict;
    # only fit uses them.
    parser.add_subclass_arguments(torch.optim.Optimizer, "optimizer", skip={"params"}, required=False,
                                  instantiate=False)
    parser.add_subclass_arguments(torch.optim.lr_scheduler.LRScheduler, "lr_scheduler", skip={"optimizer"},
                                  required=False, instantiate=False)
    parser.add_argument("--ckpt_path", type=str | None, default=None,
                        help="Resume or evaluate from 'last', 'best' or a checkpoint path.")
    # Lightning's fit/validate/... argument, in every config.yaml it saves; xtrain never unpickles a checkpoint.
    parser.add_argument("--weights_only", type=bool | None, default=None,
                        help="Lightning's; xtrain reads checkpoints with weights_only=True always (False is refused).")
    return parser


def _root_parser(with_catalogue: bool) -> Any:
    from jsonargparse import ArgumentParser

    from xtrain.core.__about__ import __version__

    epilog = None
    if with_catalogue:
        from xtrain.core._internal.cli.catalogue import catalogue

        epilog = f"Installed plugins:\n\n{catalogue()}"
    from xtrain.core._internal.cli.strict_yaml import PARSER_MODE

    parser = ArgumentParser(prog="xtrain", description=_DESCRIPTION, epilog=epilog, env_prefix="XTRAIN",
                            formatter_class=_raw_formatter(), exit_on_error=False, allow_abbrev=False,
                            parser_mode=PARSER_MODE)
    parser.add_argument("--version", action="version", version=f"xtrain-core {__version__}")
    commands = parser.add_subcommands(dest="subcommand")
    for stage in _STAGES:
        commands.add_subcommand(stage, _stage_parser(stage), help=f"{stage} a model")
    from xtrain.core._internal.cli.checkpoint import add_checkpoint_actions, checkpoint_parser

    checkpoint = checkpoint_parser()
    commands.add_subcommand("checkpoint", checkpoint, help="inspect and convert checkpoints")
    add_checkpoint_actions(checkpoint)
    from xtrain.core._internal.cli.plugin_new import add_plugin_actions, plugin_parser

    plugin = plugin_parser()
    commands.add_subcommand("plugin", plugin, help="start a plugin package of your own, or list the installed ones")
    add_plugin_actions(plugin)
    from xtrain.core._internal.migrate.runner import add_arguments

    commands.add_subcommand("migrate", add_arguments(ArgumentParser(description="Rewrite Lightning code to xtrain.")),
                            help="rewrite PyTorch Lightning code and LightningCLI configs to xtrain")
    return parser


def _raw_formatter() -> Any:
    from jsonargparse import DefaultHelpFormatter

    class Formatter(DefaultHelpFormatter):
        def _fill_text(self, text: str, width: int, indent: str) -> str:
            return "".join(indent + line for line in text.splitlines(keepends=True))

    return Formatter


def _optimizer_patch(module: Any, optimizer: Any, scheduler: Any) -> None:
    """Make ``configure_optimizers`` build the optimizer (and scheduler) given on the command line."""
    import torch
    from jsonargparse import Namespace

    from xtrain.core._internal.cli.instantiate import subclass_from_path

    def configure() -> Any:
        opt_cfg = optimizer.as_dict() if isinstance(optimizer, Namespace) else optimizer
        opt_class = subclass_from_path(opt_cfg["class_path"], (torch.optim.Optimizer,), "optimizer")
        opt = opt_class(module.parameters(), **opt_cfg.get("init_args", {}))
        if scheduler is None:
            return opt
        sch_cfg = scheduler.as_dict() if isinstance(scheduler, Namespace) else scheduler
        schedulers = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        sched = subclass_from_path(sch_cfg["class_path"], schedulers, "lr_scheduler")(opt, **sch_cfg.get("init_args", {}))
        monitor = getattr(sched, "monitor", None)  # xtrain.core.cli.ReduceLROnPlateau's metric
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": monitor} if monitor else sched}

    module.configure_optimizers = configure


def build_objects(stage_parser: Any, cfg: Any, *, model_class: type | None = None, data_class: type | None = None,
                  trainer_class: type | None = None, with_optimizer: bool = True,
                  extra_callbacks: list[Any] | None = None,
                  save_config: Callable[[Any, Any], Any] | None = None,
                  links: list[InstantiationLink] | None = None) -> tuple[Any, Any, Any]:
    """Seed, then build the module, the data module (or ``None``) and the Trainer that ``cfg`` describes.

    ``extra_callbacks`` (callback objects, which a config cannot hold) join the configured ones; ``save_config``
    builds the callback that saves the configuration from ``(parser, config)``, ``None`` to save none. ``links``
    (``link_arguments(..., apply_on="instantiate")``) pass values read from one built part to another's constructor.
    """
    import random

    from xtrain.core._internal.cli.instantiate import arguments_of
    from xtrain.core.errors import ConfigError
    from xtrain.core.seed import seed_everything
    from xtrain.core.trainer import Trainer

    if cfg.get("weights_only") is False:
        raise ConfigError("weights_only", False, "would let a checkpoint run code when it is loaded (Lightning's "
                          "torch.load(weights_only=False)); xtrain reads every checkpoint with weights_only=True.",
                          fix="leave weights_only out (or null); for a Lightning checkpoint with pickled objects, "
                              "see docs/migration.md on Lightning checkpoints.")
    seed = cfg.seed_everything
    if seed is True:
        seed = random.randint(0, 2**31 - 1)
        cfg.seed_everything = seed
    if seed is not False:
        seed_everything(int(seed))
    from xtrain.core.datamodule import DataModule
    from xtrain.core.module import TrainModule

    parts: dict[str, Callable[[Any], Any]] = {"model": lambda c: _build_part(c, model_class, TrainModule, "model")}
    if cfg.get("data"):
        parts["data"] = lambda c: _build_part(c, data_class, DataModule, "data")
    built = build_in_order(links or [], cfg, parts)
    module, data = built["model"], built.get("data")
    trainer_class = trainer_class or Trainer
    trainer_kwargs = arguments_of(trainer_class, cfg.trainer, where="trainer")
    callbacks = trainer_kwargs.get("callbacks") or []
    callbacks = [*(callbacks if isinstance(callbacks, (list, tuple)) else [callbacks]), *(extra_callbacks or [])]
    if save_config is not None:
        callbacks.append(save_config(stage_parser, cfg))
    trainer_kwargs["callbacks"] = callbacks
    trainer = trainer_class(**trainer_kwargs)
    if with_optimizer and cfg.get("optimizer"):
        _optimizer_patch(module, cfg.optimizer, cfg.get("lr_scheduler"))
    return module, data, trainer


def _build_part(cfg: Any, cls: type | None, base: type, key: str) -> Any:
    """The model or data module: ``cls`` built from its arguments, or the ``class_path`` the config names (a
    subclass of ``cls``, else of ``base``)."""
    from xtrain.core._internal.cli.instantiate import arguments_of, instantiate

    if cls is not None and "class_path" not in (cfg.as_dict() if hasattr(cfg, "as_dict") else cfg):
        return cls(**arguments_of(cls, cfg, where=key))
    return instantiate(cfg, base=cls or base, where=key)


def _run_stage(parser: Any, stage: str, cfg: Any) -> int:
    stage_parser = _stage_parser(stage)
    from xtrain.core._internal.cli.save_config import CommandSaveConfigCallback

    savers: list[CommandSaveConfigCallback] = []

    def save_config(parser: Any, config: Any) -> CommandSaveConfigCallback:
        savers.append(CommandSaveConfigCallback(parser, config))
        return savers[-1]

    module, data, trainer = build_objects(stage_parser, cfg, with_optimizer=stage == "fit", save_config=save_config)
    for saver in savers:  # a config that would be refused is refused before any process starts
        saver.check_before_launch(trainer, resumed=stage == "fit" and cfg.ckpt_path is not None)
    kwargs: dict[str, Any] = {"datamodule": data, "ckpt_path": cfg.ckpt_path}
    if stage in ("validate", "test"):
        kwargs["verbose"] = False  # the results are printed below, one line per dataloader
    result = getattr(trainer, stage)(module, **kwargs)
    if stage == "fit" and trainer.is_global_zero:
        metrics = ", ".join(f"{k}={float(v):.4f}" for k, v in sorted(trainer.callback_metrics.items()))
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        print(f"fit finished at epoch {trainer.current_epoch}, step {trainer.global_step}: {metrics}"
              + (f"\nbest checkpoint: {best}" if best else "") + f"\nlogs: {trainer.log_dir}")
    if stage in ("validate", "test") and trainer.is_global_zero:
        for i, metrics in enumerate(result):
            print(f"{stage} results (dataloader {i}): " + ", ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items())))
    return 0


def _refused(argv: list[str], message: str) -> int:
    """Print the parser's refusal with the closest valid names, like argparse's own error (exit code 2)."""
    from xtrain.core._internal.cli.suggest import closest_names

    stage = next((a for a in argv if a in _STAGES), None)
    hints = closest_names(message, _stage_parser(stage)) if stage else []
    command = f"xtrain {stage}" if stage else "xtrain"
    print("\n".join([f"{command}: error: {message}", *hints, f"Run `{command} --help` for the options."]),
          file=sys.stderr)
    return 2


def run(argv: list[str]) -> int:
    """Run the ``xtrain`` command; returns the exit code."""
    if argv[:1] == ["migrate"]:
        from xtrain.core.migrate import main as migrate

        return migrate(argv[1:])
    try:
        import jsonargparse  # noqa: F401
    except ImportError:
        print("the xtrain command needs jsonargparse. Fix: pip install 'xtrain-core[cli]'", file=sys.stderr)
        return 2
    from xtrain.core.errors import CheckpointError, ConfigError

    for path in [os.getcwd(), *_config_dirs(argv)]:
        if path not in sys.path:  # after the standard library and the installed packages: a file beside a config
            sys.path.append(path)  # (random.py, types.py) must not replace a module torch imports
    wants_help = not argv or argv[0] in ("-h", "--help")
    parser = _root_parser(with_catalogue=wants_help)
    if not argv:
        parser.print_help()
        return 0
    from xtrain.core._internal.cli.strict_yaml import input_problem

    problem = input_problem(argv)
    if problem is not None:
        return _refused(argv, problem)
    try:
        cfg = parser.parse_args(argv)
    except ArgumentError as err:
        return _refused(argv, str(err))
    stage = cfg.subcommand
    try:
        if stage == "checkpoint":
            from xtrain.core._internal.cli.checkpoint import run_checkpoint

            return run_checkpoint(cfg.checkpoint)
        if stage == "plugin":
            from xtrain.core._internal.cli.plugin_new import run_plugin

            return run_plugin(cfg.plugin)
        return _run_stage(parser, stage, cfg[stage])
    except (ConfigError, CheckpointError) as err:
        print(f"xtrain {stage}: error: {err}", file=sys.stderr)
        return 2

"""``XtrainCLI``: the ``xtrain`` command's parser and object building, usable from a user's own script."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from xtrain.core._internal.cli.links import InstantiationLink, link_arguments
from xtrain.core._internal.cli.main import _STAGES, _stage_parser, build_objects
from xtrain.core._internal.cli.save_config import SaveConfigCallback
from xtrain.core.errors import CheckpointError, ConfigError

__all__ = ["XtrainCLI"]


class XtrainCLI:
    """Parse the command line (or ``args``) into a module, a data module and a Trainer, and optionally run a stage.

    ``python train.py fit --model.lr 0.1 --trainer.max_epochs 3`` with ``XtrainCLI(MyModel, MyData)`` in
    ``train.py``; with ``run=False`` there is no subcommand (``python train.py --model.lr 0.1``) and the script uses
    ``cli.model``, ``cli.datamodule`` and ``cli.trainer`` itself.

    Args:
        model_class: The TrainModule class whose ``__init__`` arguments become ``--model.*`` options (``None``: any
            TrainModule chosen by ``--model.class_path``).
        datamodule_class: The same for ``--data.*``.
        trainer_class: The Trainer class to build.
        save_config_callback: The callback class that saves the parsed configuration as ``config.yaml`` in the
            log directory (``None``: save nothing).
        save_config_kwargs: Its options (``{"overwrite": True}`` to replace a config already there).
        trainer_defaults: Defaults for Trainer arguments (``{"max_epochs": 5}``). Callback objects under
            ``"callbacks"`` are added to the Trainer's callbacks (a config file cannot hold objects).
        seed_everything_default: The default of ``--seed_everything``.
        parser_kwargs: Extra arguments of the ``jsonargparse.ArgumentParser`` of every subcommand (e.g.
            ``default_config_files``), or of one subcommand under its name (``{"fit": {"default_config_files":
            [...]}}``), as LightningCLI takes them. ``{"default_env": True}`` reads options from environment
            variables named as LightningCLI's: ``PL_FIT__MODEL__LR`` (``PL_MODEL__LR`` with ``run=False``); another
            ``env_prefix`` replaces ``PL``.
        subclass_mode_model: Take ``--model.class_path`` of any subclass of ``model_class``.
        subclass_mode_data: Take ``--data.class_path`` of any subclass of ``datamodule_class``.
        args: Arguments to parse instead of ``sys.argv`` (a list of strings, or a dict of the configuration).
        run: Expect a subcommand (``fit``, ``validate``, ``test``, ``predict``) and run it.

    Subclasses customize it as a ``LightningCLI`` subclass does: :meth:`add_arguments_to_parser` (with
    ``parser.add_lightning_class_args(CallbackClass, "key")`` for a callback configured by ``--key.*``, and
    ``parser.link_arguments``), :meth:`before_instantiate_classes`, and ``before_fit``/``after_fit`` (and the same
    for ``validate``, ``test``, ``predict``) around the stage that ``run`` runs.

    Attributes:
        config: The parsed configuration (of the subcommand, when ``run``).
        subcommand: The stage run (``None`` without ``run``).
        model: The module.
        datamodule: The data module, or ``None``.
        trainer: The Trainer.
    """

    def __init__(self, model_class: type | None = None, datamodule_class: type | None = None, *,
                 save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
                 save_config_kwargs: Mapping[str, Any] | None = None, trainer_class: type | None = None, trainer_defaults: Mapping[str, Any] | None = None,
                 seed_everything_default: int | bool = True, parser_kwargs: Mapping[str, Any] | None = None,
                 subclass_mode_model: bool = False, subclass_mode_data: bool = False,
                 args: list[str] | Mapping[str, Any] | None = None, run: bool = True) -> None:
        from jsonargparse import ArgumentParser

        from xtrain.core._internal.cli.strict_yaml import PARSER_MODE

        common = {k: v for k, v in (parser_kwargs or {}).items() if k not in _STAGES}
        per_stage = {k: dict(v) for k, v in (parser_kwargs or {}).items() if k in _STAGES}
        common.setdefault("env_prefix", "PL")  # LightningCLI's, read only where default_env is set
        env: dict[str, Any] = {k: common[k] for k in ("env_prefix", "default_env") if k in common}
        options: dict[str, Any] = {"model_class": model_class, "data_class": datamodule_class,
                                   "subclass_mode_model": subclass_mode_model, "subclass_mode_data": subclass_mode_data,
                                   "trainer_class": trainer_class, "seed_default": seed_everything_default,
                                   "exit_on_error": False, **common}
        defaults = {f"trainer.{k}": v for k, v in (trainer_defaults or {}).items() if k != "callbacks"}
        given = (trainer_defaults or {}).get("callbacks") or []
        extra_callbacks = list(given) if isinstance(given, (list, tuple)) else [given]
        save_options = dict(save_config_kwargs or {})
        savers: list[SaveConfigCallback] = []

        def save_config(parser: Any, config: Any) -> SaveConfigCallback:
            assert save_config_callback is not None
            savers.append(save_config_callback(parser, config, **save_options))
            return savers[-1]

        callback_keys: dict[str, type] = {}
        links: dict[str, InstantiationLink] = {}

        def stage_parser(stage: str) -> Any:
            parser = _stage_parser(stage, **{**options, **(per_stage.get(stage, {}) if run else {})})
            if defaults:
                parser.set_defaults(defaults)
            parser.add_lightning_class_args = lambda cls, key, **kw: _add_callback_args(parser, callback_keys, cls, key)
            parser.link_arguments = link_arguments(parser, links)
            self.add_arguments_to_parser(parser)
            return parser

        self.subcommand: str | None = None
        if run:
            # As the xtrain command: no abbreviated options, and a refused name gets the closest valid ones.
            parser = ArgumentParser(prog=sys.argv[0], exit_on_error=False, allow_abbrev=False, parser_mode=PARSER_MODE,
                                    **env)
            commands = parser.add_subcommands(dest="subcommand")
            for stage in _STAGES:
                commands.add_subcommand(stage, stage_parser(stage), help=f"{stage} the model")
            root = self._parse(parser, args, stage_parser, env)
            self.subcommand = str(root.subcommand)
            self.config = root[self.subcommand]
            used = stage_parser(self.subcommand)
        else:
            used = stage_parser("fit")
            self.config = self._parse(used, args, stage_parser, env)
        try:
            self._build_and_run(used, savers, callback_keys, links, extra_callbacks, model_class, datamodule_class,
                                trainer_class, subclass_mode_model, subclass_mode_data,
                                save_config if save_config_callback is not None else None)
        except (ConfigError, CheckpointError) as err:  # as the xtrain command: the message, and exit code 2
            print(f"{sys.argv[0]}{f' {self.subcommand}' if self.subcommand else ''}: error: {err}", file=sys.stderr)
            raise SystemExit(2) from err

    def _build_and_run(self, used: Any, savers: list[SaveConfigCallback], callback_keys: dict[str, type],
                       links: dict[str, InstantiationLink], extra_callbacks: list[Any], model_class: type | None,
                       datamodule_class: type | None, trainer_class: type | None, subclass_mode_model: bool,
                       subclass_mode_data: bool, save_config: Any) -> None:
        self.before_instantiate_classes()
        extra_callbacks += [cls(**self.config[key].as_dict()) for key, cls in callback_keys.items()]
        self.model, self.datamodule, self.trainer = build_objects(
            used, self.config, model_class=model_class if not subclass_mode_model else None,
            data_class=datamodule_class if not subclass_mode_data else None, trainer_class=trainer_class,
            with_optimizer=self.subcommand in (None, "fit"), extra_callbacks=extra_callbacks,
            save_config=save_config, links=list(links.values()))
        if self.subcommand is not None:
            kwargs: dict[str, Any] = {"datamodule": self.datamodule, "ckpt_path": self.config.ckpt_path}
            getattr(self, f"before_{self.subcommand}", lambda: None)()
            for saver in savers:  # a config that would be refused is refused before any process starts
                saver.check_before_launch(self.trainer, resumed=self.subcommand == "fit"
                                          and self.config.ckpt_path is not None)
            getattr(self.trainer, self.subcommand)(self.model, **kwargs)
            getattr(self, f"after_{self.subcommand}", lambda: None)()

    def add_arguments_to_parser(self, parser: Any) -> None:
        """Add options or defaults to each stage's ``jsonargparse`` parser (a subclass overrides it)."""

    def before_instantiate_classes(self) -> None:
        """Runs after parsing (``self.config`` is set), before the module, data module and Trainer are built."""

    @staticmethod
    def _parse(parser: Any, args: list[str] | Mapping[str, Any] | None, stage_parser: Any,
               env: Mapping[str, Any]) -> Any:
        """Parse; a refusal prints the parser's usage and message with the closest valid names, and exits with 2
        (as argparse, and LightningCLI)."""
        from argparse import ArgumentError

        from xtrain.core._internal.cli.strict_yaml import input_problem
        from xtrain.core._internal.cli.suggest import closest_names

        argv = sys.argv[1:] if args is None else list(args) if not isinstance(args, Mapping) else []
        prefix = env.get("env_prefix")
        problem = input_problem(argv, env_prefixes=("XTRAIN_", f"{prefix}_") if isinstance(prefix, str)
                                else ("XTRAIN_",))  # JSONARGPARSE_DEFAULT_ENV may turn the variables on
        try:
            if problem is not None:
                raise ArgumentError(None, problem)
            if isinstance(args, Mapping):
                return parser.parse_object(dict(args))
            return parser.parse_args(args)
        except ArgumentError as err:
            stage = next((a for a in argv if a in _STAGES), "fit")
            parser.print_usage(sys.stderr)
            print("\n".join([f"{parser.prog}: error: {err}", *closest_names(str(err), stage_parser(stage))]),
                  file=sys.stderr)
            raise SystemExit(2) from err


def _add_callback_args(parser: Any, keys: dict[str, type], cls: type, key: str) -> None:
    """``parser.add_lightning_class_args``: ``--key.*`` options for ``cls``; a callback built from them joins the
    Trainer's callbacks."""
    from xtrain.core.callbacks.callback import Callback

    parser.add_class_arguments(cls, key, fail_untyped=False, instantiate=False)
    if isinstance(cls, type) and issubclass(cls, Callback):
        keys[key] = cls

"""Trial Y: what LightningCLI builds from a config, xtrain builds the same way, and nothing more.

Each case was found side by side with Lightning 2.6.6: ``OptimizerCallable`` arguments, containers and dataclasses of
classes, ``dict_kwargs``, ``X | dict`` unions, ``init_args`` link targets, nested config files, per-subcommand
``parser_kwargs``, ``default_env``, ``-c``, and fit's config reused by ``test``. The refusals stay: a config never
reaches a class the constructor's annotation does not name.
"""

from __future__ import annotations

import sys
import textwrap
import typing
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("jsonargparse")

import torch

from xtrain.core._internal.cli.instantiate import ClassFactory, _build
from xtrain.core._internal.cli.main import _config_dirs, _stage_parser, build_objects
from xtrain.core.errors import ConfigError

MODULE = """
import collections.abc
import typing
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn

from xtrain.core import DataModule, TrainModule
from xtrain.core.cli import OptimizerCallable  # what xtrain migrate writes for Lightning's


@dataclass
class Conf:
    lr: float = 0.1
    betas: tuple[float, float] = (0.9, 0.99)


class Model(TrainModule):
    def __init__(self, optimizer: OptimizerCallable = torch.optim.Adam, act: Callable[[], nn.Module] = nn.ReLU,
                 heads: dict[str, nn.Module] | None = None, pair: tuple[nn.Module, ...] | None = None,
                 conf: Conf = Conf(), named: dict[str, float] | None = None, aug: nn.Module | dict | None = None,
                 f1: collections.abc.Callable | None = None, f2: typing.Callable | None = None,
                 num_classes: int = 2, **kwargs):
        super().__init__()
        self.layer = nn.Linear(2, num_classes)
        self.optimizer, self.act, self.heads, self.pair, self.conf = optimizer, act, heads, pair, conf
        self.named, self.aug, self.f1, self.f2, self.num_classes, self.kwargs = named, aug, f1, f2, num_classes, kwargs


class Data(DataModule):
    def __init__(self, num_classes: int = 2):
        super().__init__()
        self.num_classes = num_classes
"""

TRAINER = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False}


@pytest.fixture
def mod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"cli_trial_y_models_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


def _config(tmp_path: Path, mod: str, init_args: dict[str, Any], **more: Any) -> Path:
    config = tmp_path / "config.yaml"
    model: dict[str, Any] = {"class_path": f"{mod}.Model", "init_args": init_args}
    model.update(more.pop("model_extra", {}))
    config.write_text(yaml.safe_dump({"trainer": {**TRAINER, "default_root_dir": str(tmp_path / "run")},
                                      "model": model, **more}))
    return config


def _model(tmp_path: Path, mod: str, init_args: dict[str, Any], stage: str = "fit", argv: tuple[str, ...] = (),
           **more: Any) -> Any:
    from xtrain.core._internal.cli.strict_yaml import enforce_import_policy

    enforce_import_policy()
    config = _config(tmp_path, mod, init_args, **more)
    cfg = _stage_parser(stage).parse_args(["--config", str(config), *argv])
    module, _, _ = build_objects(_stage_parser(stage), cfg, save_config=None, with_optimizer=stage == "fit")
    return module


# 1 and 10: Callable[..., R] with R a class


def test_an_optimizer_callable_builds_its_default_and_a_configured_subclass(tmp_path: Path, mod: str) -> None:
    params = [torch.nn.Parameter(torch.zeros(2))]
    module = _model(tmp_path, mod, {})
    assert isinstance(module.optimizer, ClassFactory) and type(module.optimizer(params)) is torch.optim.Adam
    assert type(module.act()) is torch.nn.ReLU
    module = _model(tmp_path, mod, {"optimizer": {"class_path": "torch.optim.SGD",
                                                  "init_args": {"lr": 0.1, "momentum": 0.9}},
                                    "act": {"class_path": "torch.nn.Tanh"}})
    built = module.optimizer(params)
    assert type(built) is torch.optim.SGD and built.defaults["momentum"] == 0.9 and built.defaults["lr"] == 0.1
    assert type(module.act()) is torch.nn.Tanh
    module = _model(tmp_path, mod, {}, argv=("--model.init_args.optimizer", "torch.optim.SGD"))
    assert type(module.optimizer(params)) is torch.optim.SGD


@pytest.mark.parametrize("path", ["subprocess.Popen", "functools.partial", "torch.nn.Linear", "string.Template"])
def test_a_callable_of_a_class_takes_only_its_subclasses(path: str) -> None:
    hint = typing.Callable[[Iterable[Any]], torch.optim.Optimizer]
    with pytest.raises(ConfigError, match="not a subclass of what the parameter takes"):
        _build({"class_path": path, "init_args": {}}, hint, "model.init_args.optimizer")
    for refused in (typing.Callable[..., Any], typing.Callable[..., object], typing.Callable,
                    typing.Optional[typing.Callable]):  # noqa: UP045 - the spelling the trial used
        with pytest.raises(ConfigError, match="only where the constructor's annotation names a class"):
            _build({"class_path": "torch.nn.ReLU"}, refused, "f")


@pytest.mark.parametrize("parameter", ["f1", "f2"])
def test_a_bare_callable_refuses_a_class_path_whichever_module_spells_it(tmp_path: Path, mod: str,
                                                                          parameter: str) -> None:
    with pytest.raises(ConfigError, match="only where the constructor's annotation names a class") as refused:
        _model(tmp_path, mod, {parameter: {"class_path": "torch.nn.Linear",
                                           "init_args": {"in_features": 2, "out_features": 2}}})
    assert f"model.init_args.{parameter}='torch.nn.Linear'" in str(refused.value)


# 2: dict[str, X], tuple[X, ...], dataclasses


def test_containers_of_classes_and_dataclasses_are_built(tmp_path: Path, mod: str) -> None:
    module = _model(tmp_path, mod, {
        "heads": {"cls": {"class_path": "torch.nn.Linear", "init_args": {"in_features": 2, "out_features": 3}},
                  "reg": {"class_path": "torch.nn.Identity"}},
        "pair": [{"class_path": "torch.nn.ReLU"}, {"class_path": "torch.nn.Tanh"}],
        "conf": {"lr": 0.01}, "named": {"a": 1.0}})
    assert {k: type(v) for k, v in module.heads.items()} == {"cls": torch.nn.Linear, "reg": torch.nn.Identity}
    assert module.heads["cls"].out_features == 3
    assert isinstance(module.pair, tuple) and [type(x) for x in module.pair] == [torch.nn.ReLU, torch.nn.Tanh]
    assert type(module.conf).__name__ == "Conf" and module.conf.lr == 0.01 and module.conf.betas == (0.9, 0.99)
    assert module.named == {"a": 1.0}


def test_a_container_item_outside_its_class_is_refused() -> None:
    payload = {"class_path": "subprocess.Popen", "init_args": {"args": ["true"]}}
    with pytest.raises(ConfigError, match="not a subclass"):
        _build({"x": payload}, dict[str, torch.nn.Module], "heads")
    with pytest.raises(ConfigError, match="not a subclass"):
        _build((payload,), tuple[torch.nn.Module, ...], "pair")
    assert _build({"x": payload}, dict[str, Any], "extra") == {"x": payload}  # a dict of data stays data


# 3: dict_kwargs


def test_dict_kwargs_reach_a_constructor_taking_kwargs_as_data(tmp_path: Path, mod: str) -> None:
    module = _model(tmp_path, mod, {"num_classes": 3},
                    model_extra={"dict_kwargs": {"dropout": 0.5, "tag": "abc",
                                                 "data": {"class_path": "torch.nn.ReLU"}}})
    assert module.num_classes == 3
    assert module.kwargs == {"dropout": 0.5, "tag": "abc", "data": {"class_path": "torch.nn.ReLU"}}


# 4: fit's config serves test, validate and predict


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_every_stage_takes_fits_optimizer_sections(tmp_path: Path, mod: str, stage: str) -> None:
    module = _model(tmp_path, mod, {}, stage=stage,
                    optimizer={"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.003}},
                    lr_scheduler={"class_path": "torch.optim.lr_scheduler.StepLR", "init_args": {"step_size": 1}})
    assert "configure_optimizers" not in vars(module)  # only fit uses them


# 5: X | dict


def test_a_union_with_a_class_builds_a_subclass_and_keeps_other_dicts(tmp_path: Path, mod: str) -> None:
    module = _model(tmp_path, mod, {"aug": {"class_path": "torch.nn.Dropout", "init_args": {"p": 0.1}}})
    assert type(module.aug) is torch.nn.Dropout and module.aug.p == 0.1
    payload = {"class_path": "string.Template", "init_args": {"template": "x"}}
    assert _build(payload, torch.nn.Module | dict | None, "aug") == payload
    assert _build({"class_path": "subprocess.Popen", "init_args": {"args": ["true"]}}, torch.nn.Module | dict,
                  "aug") == {"class_path": "subprocess.Popen", "init_args": {"args": ["true"]}}


# 6: link_arguments to model.init_args.X


@pytest.mark.parametrize("target", ["model.init_args.num_classes", "model.num_classes"])
def test_an_instantiation_link_takes_the_init_args_form(tmp_path: Path, mod: str, target: str) -> None:
    from xtrain.core.cli import XtrainCLI

    class CLI(XtrainCLI):
        def add_arguments_to_parser(self, parser: Any) -> None:
            parser.link_arguments("data.num_classes", target, apply_on="instantiate")

    cli = CLI(subclass_mode_model=True, subclass_mode_data=True, run=False, save_config_callback=None,
              trainer_defaults=TRAINER, args=["--model", f"{mod}.Model", "--data", f"{mod}.Data",
                                              "--data.num_classes", "5"])
    assert cli.model.num_classes == 5 and cli.datamodule.num_classes == 5


# 7: a part given as a file of its own


def test_a_nested_config_file_builds(tmp_path: Path, mod: str) -> None:
    (tmp_path / "trainer.yaml").write_text(yaml.safe_dump({**TRAINER, "max_epochs": 3}))
    (tmp_path / "model.yaml").write_text(yaml.safe_dump({"class_path": f"{mod}.Model",
                                                         "init_args": {"num_classes": 4}}))
    config = tmp_path / "nested.yaml"
    config.write_text("trainer: trainer.yaml\nmodel: model.yaml\n")
    cfg = _stage_parser("fit").parse_args(["--config", str(config)])
    module, _, trainer = build_objects(_stage_parser("fit"), cfg, save_config=None)
    assert trainer.max_epochs == 3 and module.num_classes == 4


# 8: parser_kwargs per subcommand, default_env; 9: -c


class _Stop(Exception):
    pass


def _fit_without_training(mod: str, **kwargs: Any) -> Any:
    from xtrain.core.cli import XtrainCLI

    seen: list[Any] = []

    class Probe(XtrainCLI):
        def before_fit(self) -> None:
            seen.append(self)
            raise _Stop

    module = sys.modules[mod] if mod in sys.modules else __import__(mod)
    with pytest.raises(_Stop):
        Probe(module.Model, save_config_callback=None, trainer_defaults=TRAINER, **kwargs)
    return seen[0]


def test_parser_kwargs_per_subcommand(tmp_path: Path, mod: str) -> None:
    (tmp_path / "fit_defaults.yaml").write_text("model: {num_classes: 6}\n")
    cli = _fit_without_training(mod, parser_kwargs={"fit": {"default_config_files": ["fit_defaults.yaml"]}},
                                args=["fit"])
    assert cli.model.num_classes == 6


def test_default_env_reads_lightnings_variable_names(mod: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PL_FIT__MODEL__NUM_CLASSES", "7")
    assert _fit_without_training(mod, parser_kwargs={"default_env": True}, args=["fit"]).model.num_classes == 7
    assert _fit_without_training(mod, args=["fit"]).model.num_classes == 2  # off unless asked for


def test_a_short_c_flag_is_config(tmp_path: Path, mod: str) -> None:
    config = _config(tmp_path, mod, {"num_classes": 3})
    cfg = _stage_parser("fit").parse_args(["-c", str(config)])
    assert cfg.model.init_args.num_classes == 3
    assert _config_dirs(["fit", "-c", str(config)]) == [str(config.resolve().parent)]
    (tmp_path / "short.yaml").write_text("model: {num_classes: 5}\n")
    assert _fit_without_training(mod, args=["fit", "-c", "short.yaml"]).model.num_classes == 5


# a refusal inside a script: the message and exit code 2


def test_a_config_error_in_a_script_exits_2_with_the_message(tmp_path: Path, mod: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from xtrain.core.cli import XtrainCLI

    module = sys.modules[mod] if mod in sys.modules else __import__(mod)
    with pytest.raises(SystemExit) as exited:
        XtrainCLI(module.Model, run=False, save_config_callback=None, trainer_defaults=TRAINER,
                  args=["--model.f2", '{"class_path": "torch.nn.ReLU"}'])
    assert exited.value.code == 2
    assert "error: model.f2='torch.nn.ReLU'" in capsys.readouterr().err

"""A config's ``class_path`` builds only what the constructor's annotation allows.

An outside trial ran ``os.system`` from a YAML config: ``extra: {class_path: os.system, init_args: {command: ...}}``
under a parameter annotated ``dict``, which the CLI called like any class. A config may name classes, and only
subclasses of the class a parameter is annotated with; everything else is data or refused. A few hundred bytes of
YAML aliases made the CLI grow to gigabytes; they are refused as the hyperparameter files are.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from xtrain.core._internal.cli.main import _stage_parser, build_objects
from xtrain.core.errors import ConfigError

MODULE = """
from typing import Any

import torch

from xtrain.core.testing import TinyClassifier


class Model(TinyClassifier):
    def __init__(self, extra: dict | None = None, anything: Any = None, untyped=None,
                 head: torch.nn.Module | None = None, hidden: "NoSuchThing | None" = None,
                 records: list[dict] | None = None, layers: list[torch.nn.Module] | None = None) -> None:
        super().__init__()
        self.extra, self.anything, self.untyped, self.head, self.hidden = extra, anything, untyped, head, hidden
        self.records, self.layers = records, layers
"""


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    name = f"cli_class_path_models_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path / name
    sys.modules.pop(name, None)


def _build(models: Path, init_args: dict[str, Any]) -> Any:
    from xtrain.core._internal.cli.strict_yaml import enforce_import_policy

    enforce_import_policy()  # as the command does before it parses (process-wide: the order of tests must not matter)
    config = models.parent / "config.yaml"
    config.write_text(yaml.safe_dump({
        "trainer": {"logger": False, "enable_checkpointing": False, "default_root_dir": str(models.parent / "run")},
        "model": {"class_path": f"{models.name}.Model", "init_args": init_args}}))
    cfg = _stage_parser("fit").parse_args(["--config", str(config)])
    module, _, _ = build_objects(_stage_parser("fit"), cfg, save_config=None)
    return module


def _payload(models: Path) -> dict[str, Any]:
    """A class outside jsonargparse's import denylist, which refuses ``os.system`` itself (see the test below)."""
    return {"class_path": "string.Template", "init_args": {"template": str(models.parent / "PWNED")}}


def test_a_class_path_under_a_dict_parameter_stays_data(models: Path) -> None:
    module = _build(models, {"extra": _payload(models)})
    assert module.extra == _payload(models)


def test_os_system_in_a_config_never_runs(models: Path) -> None:
    """The trial's payload: refused by the import denylist the command enforces, under any annotation."""
    from argparse import ArgumentError

    payload = {"class_path": "os.system", "init_args": {"command": f"touch {models.parent / 'PWNED'}"}}
    for parameter in ("extra", "anything", "untyped", "hidden"):
        with pytest.raises((ArgumentError, ConfigError)) as refused:
            _build(models, {parameter: payload})
        assert "os.system" in str(refused.value)
    assert not (models.parent / "PWNED").exists()


@pytest.mark.parametrize(("parameter", "said"), [
    ("anything", "annotated typing.Any"),
    ("untyped", "an annotation that does not resolve"),
    ("hidden", "an annotation that does not resolve"),
])
def test_a_class_path_where_no_class_is_declared_is_refused(models: Path, parameter: str, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        _build(models, {parameter: _payload(models)})
    message = str(refused.value)
    assert f"model.init_args.{parameter}" in message and "string.Template" in message and said in message
    assert "annotate the parameter with the class it takes" in message


def test_a_declared_class_is_built_with_its_own_arguments_checked(models: Path) -> None:
    import torch

    module = _build(models, {"head": {"class_path": "torch.nn.Linear",
                                      "init_args": {"in_features": 2, "out_features": 3}}})
    assert isinstance(module.head, torch.nn.Linear) and module.head.out_features == 3


def test_a_class_outside_the_declared_one_is_refused_even_past_the_parser(models: Path) -> None:
    """jsonargparse checks subclasses when it parses; the builder checks again (a link or a hook may set values)."""
    import torch

    from xtrain.core._internal.cli.instantiate import instantiate

    with pytest.raises(ConfigError, match="not a subclass of what the parameter takes") as refused:
        instantiate({"class_path": "subprocess.Popen", "init_args": {"args": ["true"]}}, base=torch.nn.Module,
                    where="model.init_args.head")
    assert "torch.nn.modules.module.Module" in str(refused.value)


def test_an_alias_bomb_in_a_config_is_refused_before_it_expands(tmp_path: Path) -> None:
    levels = ["l0: &x0 [a, a, a, a, a, a, a, a, a, a]"]
    levels += [f"l{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]" for i in range(1, 8)]
    config = tmp_path / "bomb.yaml"
    config.write_text("model:\n  class_path: xtrain.core.testing.TinyClassifier\nextra:\n"
                      + "".join(f"  {line}\n" for line in levels))
    with pytest.raises(Exception, match="more than the 10,000 allowed") as refused:
        _stage_parser("fit").parse_args(["--config", str(config)])
    assert "write each value out once" in str(refused.value)


def test_list_items_are_judged_by_the_lists_item_annotation(models: Path) -> None:
    import torch

    module = _build(models, {"records": [_payload(models)],
                             "layers": [{"class_path": "torch.nn.ReLU"},
                                        {"class_path": "torch.nn.Linear", "init_args": {"in_features": 2,
                                                                                        "out_features": 2}}]})
    assert module.records == [_payload(models)]
    assert [type(layer) for layer in module.layers] == [torch.nn.ReLU, torch.nn.Linear]


def test_annotations_imported_for_type_checking_only_resolve(tmp_path: Path) -> None:
    """xtrain's strategies import Accelerator and the others under TYPE_CHECKING: a nested accelerator was refused."""
    from xtrain.core._internal.cli.instantiate import instantiate
    from xtrain.core.defaults.cpu import CPUAccelerator
    from xtrain.core.strategy import Strategy

    built = instantiate({"class_path": "xtrain.core.defaults.single_device.SingleDeviceStrategy",
                         "init_args": {"accelerator": {"class_path": "xtrain.core.defaults.cpu.CPUAccelerator"}}},
                        base=Strategy, where="trainer.strategy")
    assert isinstance(built.accelerator, CPUAccelerator)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from xtrain.core._internal.cli.main import run

    code = run(argv)
    return code, capsys.readouterr().err


def test_a_callable_naming_a_dangerous_function_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``lr_lambda: os._exit`` ended the run silently with exit code 0; ``builtins.print`` was called each epoch."""
    monkeypatch.chdir(tmp_path)
    for target in ("os._exit", "builtins.print"):
        config = tmp_path / "c.yaml"
        config.write_text(yaml.safe_dump({
            "model": {"class_path": "xtrain.core.testing.TinyClassifier"},
            "data": {"class_path": "xtrain.core.testing.TinyData"},
            "trainer": {"max_steps": 1, "logger": False, "default_root_dir": str(tmp_path / "run")},
            "optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1}},
            "lr_scheduler": {"class_path": "torch.optim.lr_scheduler.LambdaLR", "init_args": {"lr_lambda": target}}}))
        code, err = _run(["fit", "--config", str(config)], capsys)
        assert code == 2 and target in err and "not allowed" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", [
    "{a0: &a0 [x,x,x,x,x,x,x,x,x,x], " + ", ".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]"
                                                      for i in range(1, 6)) + "}",
    "[" * 20000 + "]" * 20000,
])
def test_a_command_line_value_that_expands_or_nests_too_far_is_refused(tmp_path: Path, value: str,
                                                                       capsys: pytest.CaptureFixture[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """jsonargparse reads a typed value with its own loader, past the config files' bounds (gigabytes, or a
    RecursionError traceback)."""
    monkeypatch.chdir(tmp_path)
    code, err = _run(["fit", "--model", "xtrain.core.testing.TinyClassifier", "--trainer.plugins", value], capsys)
    assert code == 2 and ("more than the 10,000 allowed" in err or "nested too deeply" in err)


def test_a_file_beside_the_config_does_not_replace_an_installed_module(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "colorsys.py").write_text("raise SystemExit('the config folder shadowed colorsys')\n")
    config = tmp_path / "c.yaml"
    config.write_text("model: {class_path: xtrain.core.testing.TinyClassifier}\n")
    with pytest.raises(SystemExit) as printed:  # --print_config prints and exits 0
        _run(["fit", "--config", str(config), "--print_config"], capsys)
    assert printed.value.code == 0
    assert sys.path.index(str(tmp_path)) > sys.path.index(next(p for p in sys.path if "site-packages" in p))


def test_reduce_lr_on_plateau_from_a_config_monitors_its_metric(tmp_path: Path) -> None:
    from xtrain.core.cli import ReduceLROnPlateau

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"class_path": "xtrain.core.testing.TinyClassifier"},
        "trainer": {"logger": False},
        "optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1}},
        "lr_scheduler": {"class_path": "xtrain.core.cli.ReduceLROnPlateau",
                         "init_args": {"monitor": "val_loss", "patience": 2}}}))
    cfg = _stage_parser("fit").parse_args(["--config", str(config)])
    module, _, _ = build_objects(_stage_parser("fit"), cfg, save_config=None)
    configured = module.configure_optimizers()
    scheduler = configured["lr_scheduler"]
    assert scheduler["monitor"] == "val_loss" and isinstance(scheduler["scheduler"], ReduceLROnPlateau)
    assert scheduler["scheduler"].patience == 2

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
from typing import TYPE_CHECKING, Any

import torch

from xtrain.core.testing import TinyClassifier

if TYPE_CHECKING:
    from collections import OrderedDict


class Model(TinyClassifier):
    def __init__(self, extra: dict | None = None, anything: Any = None, untyped=None,
                 head: torch.nn.Module | None = None, hidden: "OrderedDict | None" = None) -> None:
        super().__init__()
        self.extra, self.anything, self.untyped, self.head, self.hidden = extra, anything, untyped, head, hidden
"""


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    name = f"cli_class_path_models_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path / name
    sys.modules.pop(name, None)


def _build(models: Path, init_args: dict[str, Any]) -> Any:
    config = models.parent / "config.yaml"
    config.write_text(yaml.safe_dump({
        "trainer": {"logger": False, "enable_checkpointing": False, "default_root_dir": str(models.parent / "run")},
        "model": {"class_path": f"{models.name}.Model", "init_args": init_args}}))
    cfg = _stage_parser("fit").parse_args(["--config", str(config)])
    module, _, _ = build_objects(_stage_parser("fit"), cfg, save_config=None)
    return module


def _payload(models: Path) -> dict[str, Any]:
    return {"class_path": "os.system", "init_args": {"command": f"touch {models.parent / 'PWNED'}"}}


def test_a_class_path_under_a_dict_parameter_stays_data(models: Path) -> None:
    module = _build(models, {"extra": _payload(models)})
    assert module.extra == _payload(models)
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
    assert f"model.init_args.{parameter}" in message and "os.system" in message and said in message
    assert "annotate the parameter with the class it takes" in message
    assert not (models.parent / "PWNED").exists()


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

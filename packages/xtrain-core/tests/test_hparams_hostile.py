"""Hostile hyperparameters read from disk: nesting too deep for the parsers, shared-reference "billion laughs" (YAML
aliases, pickle's memo) and self-reference are a CheckpointError naming the file, quickly and without expanding."""

from __future__ import annotations

import time
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import CheckpointError
from xtrain.core._internal.bounded import MAX_DEPTH, bounds_problem, check_bounded
from xtrain.core._internal.hparams import loggable_hparams
from xtrain.core._internal.hparams_file import read_hparams_file, write_hparams_yaml
from xtrain.core.testing import TinyClassifier

pytest.importorskip("yaml")


class Kwargs(TinyClassifier):
    def __init__(self, lr: float = 0.1, **config: Any) -> None:
        super().__init__(lr=lr)
        self.save_hyperparameters()


def _bomb(levels: int) -> list[Any]:
    """9 ** (levels + 1) strings once expanded, ``levels + 1`` distinct lists."""
    value: list[Any] = ["lol"] * 9
    for _ in range(levels):
        value = [value] * 9
    return value


def _yaml_bomb(levels: int) -> str:
    return "lr: 0.1\nl0: &a0 [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
        f"l{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, levels + 1))


def _checkpoint(path: Path, hparams: dict[str, Any]) -> Path:
    torch.save({"state_dict": TinyClassifier().state_dict(), "hyper_parameters": hparams}, path)
    return path


@pytest.mark.parametrize(("name", "text"), [
    ("deep.json", "[" * 200_000 + "]" * 200_000),
    ("deep_dict.json", '{"a":' * 100_000 + "1" + "}" * 100_000),
    ("deep.yaml", "a: " + "[" * 20_000 + "]" * 20_000 + "\n"),
])
def test_nesting_too_deep_for_the_parser_is_a_checkpoint_error_naming_the_file(tmp_path: Path, name: str,
                                                                                text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CheckpointError, match=rf"{name}' is nested too deeply for the .* parser.*at most 100 levels"):
        read_hparams_file(path)
    with pytest.raises(CheckpointError, match=name):
        Kwargs.load_from_checkpoint(_checkpoint(tmp_path / "m.ckpt", {}), hparams_file=path)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_nesting_the_parser_follows_but_past_the_bound_is_refused_with_the_depth(tmp_path: Path,
                                                                                  suffix: str) -> None:
    path = tmp_path / f"hparams{suffix}"
    path.write_text('{"a": ' + "[" * 150 + "]" * 150 + "}")
    with pytest.raises(CheckpointError, match=r"nested more than 100 levels deep \(at 'a\[0\]\[0\]\[0\]"):
        read_hparams_file(path)
    path.write_text('{"a": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}")  # the top mapping is one
    assert read_hparams_file(path)["a"] is not None


def test_a_yaml_alias_bomb_is_refused_quickly_without_expanding(tmp_path: Path) -> None:
    path = tmp_path / "hparams.yaml"
    path.write_text(_yaml_bomb(30))  # 9 ** 31 values once expanded
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=r"hparams\.yaml' repeats shared entries: they add [\d,]+ or more values "
                                              r".*more than the 10,000 allowed.*Fix:"):
        Kwargs.load_from_checkpoint(_checkpoint(tmp_path / "m.ckpt", {}), hparams_file=path, strict=False)
    assert time.perf_counter() - start < 0.5


def test_a_self_referencing_yaml_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "hparams.yaml"
    path.write_text("lr: &a [*a]\n")
    with pytest.raises(CheckpointError, match=r"hparams\.yaml' refers to itself: 'lr\[0\]'"):
        read_hparams_file(path)


def test_a_shared_reference_bomb_in_the_checkpoint_is_refused_quickly(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "bomb.ckpt", {"lr": 0.1, "bomb": _bomb(30)})  # pickle's memo keeps the sharing
    assert path.stat().st_size < 100_000
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=r"bomb\.ckpt': entry 'hyper_parameters' repeats shared entries.*"
                                              r"'bomb\[0\]"):
        Kwargs.load_from_checkpoint(path)
    assert time.perf_counter() - start < 0.5


def test_a_datamodule_hparams_bomb_in_the_checkpoint_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bomb.ckpt"
    torch.save({"state_dict": TinyClassifier().state_dict(), "hyper_parameters": {"lr": 0.1},
                "datamodule_hyper_parameters": {"x": _bomb(30)}}, path)
    with pytest.raises(CheckpointError, match=r"entry 'datamodule_hyper_parameters' repeats shared entries"):
        Kwargs.load_from_checkpoint(path)


def test_hparams_that_would_expand_are_not_logged(tmp_path: Path) -> None:
    module = Kwargs(lr=0.1, bomb=_bomb(30))
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=r"Kwargs\.hparams \(sent to the loggers.*repeats shared entries"):
        loggable_hparams(module)
    with pytest.raises(CheckpointError, match=r"to write to '.*hparams\.yaml' repeats shared entries"):
        write_hparams_yaml(tmp_path / "hparams.yaml", {"bomb": _bomb(30)})
    assert time.perf_counter() - start < 0.5
    assert not (tmp_path / "hparams.yaml").exists()


def test_the_walk_is_iterative_and_counts_expanded_values() -> None:
    deep: list[Any] = []
    for _ in range(50_000):  # deeper than Python's recursion limit
        deep = [deep]
    assert "nested more than 100 levels deep" in str(bounds_problem(deep))
    assert bounds_problem(_bomb(3)) is None  # 7,381 values, 7,380 of them repeats: under both bounds
    start = time.perf_counter()
    assert bounds_problem({"vocab": {f"w{i}": i for i in range(200_000)}}) is None  # large but flat is fine
    assert time.perf_counter() - start < 1
    assert "expands to 1,000,001 or more values" in str(bounds_problem(list(range(1_000_000))))
    assert bounds_problem({"a": [[[1]]]}, depth=3) == ("is nested more than 3 levels deep (at 'a[0][0]'); at most 3 "
                                                       "levels are read")
    inner = [[1]]  # measured once, then its depth is added where it is reached again
    assert bounds_problem({"a": inner, "b": [inner]}, depth=3) == ("is nested 4 levels deep (at 'b[0]'); at most 3 "
                                                                   "levels are read")


def test_legitimate_hparams_file_and_checkpoint_load_unchanged(tmp_path: Path) -> None:
    config = {"lr": 0.01, "name": "run", "layers": [64, 32, {"act": "relu", "drop": [0.1, 0.2]}], "flag": True,
              "none": None, "opt": {"betas": [0.9, 0.999], "nested": {f"k{i}": list(range(20)) for i in range(200)}},
              "vocab": {f"w{i}": i for i in range(5_000)}}
    args = vars(Namespace(batch=32, root="data"))
    path = tmp_path / "hparams.yaml"
    write_hparams_yaml(path, {**config, **args})
    start = time.perf_counter()
    assert read_hparams_file(path) == {**config, **args}
    anchors = tmp_path / "anchors.yaml"  # a few aliases that share small values are fine
    anchors.write_text("base: &b {lr: 0.1, betas: [0.9, 0.99]}\nteacher: *b\nstudent: {<<: *b, lr: 0.2}\n")
    assert read_hparams_file(anchors)["student"] == {"lr": 0.2, "betas": [0.9, 0.99]}
    checkpoint = _checkpoint(tmp_path / "m.ckpt", {**config, "shared": [args["root"]] * 3})
    loaded = Kwargs.load_from_checkpoint(checkpoint)
    assert {key: loaded.hparams[key] for key in config} == config and loaded.hparams["shared"] == ["data"] * 3
    assert Kwargs.load_from_checkpoint(checkpoint, hparams_file=path).hparams["vocab"] == config["vocab"]
    check_bounded(loaded.hparams, where="unused")
    assert time.perf_counter() - start < 10  # about 2.5 s alone; a bound for the checks, roomy for a loaded machine


def test_a_key_written_twice_is_refused_naming_the_file_and_both_lines(tmp_path: Path) -> None:
    """YAML keeps the second of two equal keys: a file saying ``hidden: 4`` and later ``hidden: 5`` built a model
    the checkpoint did not fit, and the error then blamed the checkpoint (found by a hostile-file trial)."""
    path = tmp_path / "hparams.yaml"
    path.write_text("lr: 0.1\nnested:\n  a: 1\n  a: 2\n")
    with pytest.raises(CheckpointError, match=r"hparams_file '.*hparams.yaml': the key 'a' is written twice in one "
                                              r"mapping \(lines 3 and 4\)"):
        read_hparams_file(path)
    path.write_text("lr: 0.1\nfirst: {a: 1}\nsecond: {a: 2}\nshared: &s {a: 3}\nagain: *s\n")
    assert read_hparams_file(path)["again"] == {"a": 3}, "one key in several mappings is not a repetition"

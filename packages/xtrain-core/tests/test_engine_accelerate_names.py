"""Accelerate's and Fabric's names on the Engine: Python's AttributeError, followed by the Engine's equivalent."""

from __future__ import annotations

import inspect
import re

import pytest

from xtrain.core import Engine
from xtrain.core._internal.engine_hints import EQUIVALENTS, missing_engine_attribute


def python_sentence(name: str) -> str:
    """What Python itself says for a missing attribute of an object whose class is called ``Engine``."""
    plain = type("Engine", (), {})()
    with pytest.raises(AttributeError) as info:
        getattr(plain, name)
    return str(info.value)


@pytest.mark.parametrize(("name", "equivalents"), [
    ("gather", ["engine.gather_for_metrics(t)", "engine.all_gather(t)", "repeated samples dropped"]),
    ("prepare", ["model, optimizer = engine.setup(model, optimizer)", "engine.setup_dataloaders(loader)",
                 "scheduler needs no setup"]),
    ("reduce", ['engine.all_reduce(t, reduce_op="sum")', "default is sum"]),
    ("wait_for_everyone", ["engine.barrier()"]),
    ("is_local_main_process", ["engine.local_rank == 0"]),
    ("local_main_process_first", ["with engine.rank_zero_first(local=True):"]),
    ("unwrap_model", ["model.module"]),
    ("clip_grad_value_", ["engine.clip_gradients(model, optimizer, clip_val=...)"]),
    ("accumulate", ["with engine.no_backward_sync(model, enabled=not last_micro_batch):", ") / K"]),
    ("save_state", ["engine.save(path, state)", '"loader": loader', "engine.resume(folder, state)"]),
    ("skip_first_batches", ["engine.load", "position"]),
    ("log", ["engine.is_global_zero", "no trackers"]),
])
def test_a_ported_name_gets_the_equivalent(name: str, equivalents: list[str]) -> None:
    error = missing_engine_attribute(name)
    message = str(error)
    assert isinstance(error, AttributeError)
    assert error.name == name
    assert message.startswith(python_sentence(name) + ". ")
    for code in equivalents:
        assert code in message, (code, message)


@pytest.mark.parametrize("name", ["not_an_accelerate_name", "_private", "__deepcopy__", "_prepare"])
def test_other_names_get_python_sentence_only(name: str) -> None:
    """Unknown and private names (``copy``/``pickle`` probe those) read exactly as Python's own error."""
    assert str(missing_engine_attribute(name)) == python_sentence(name)


def engine_attributes() -> set[str]:
    properties = {name for name, _ in inspect.getmembers(Engine, lambda member: isinstance(member, property))}
    return set(dir(Engine)) | properties | set(vars(Engine(accelerator="cpu", devices=1)))


def test_no_hint_hides_a_real_engine_attribute() -> None:
    """A name the Engine has never reaches ``__getattr__``: listing it would document a lie."""
    real = engine_attributes()
    assert {"all_gather", "gather_for_metrics", "pad_across_processes", "is_global_zero", "world_size", "save",
            "autocast"} <= real  # the guard looks in the right place
    assert sorted(set(EQUIVALENTS) & real) == []


def test_every_engine_call_in_a_hint_exists() -> None:
    """The equivalents name only what the Engine offers, so pasted code runs."""
    real = engine_attributes()
    named = {m for hint in EQUIVALENTS.values() for m in re.findall(r"(?<![\w/])engine\.(\w+)", hint)}
    assert named, "no engine.<name> found in the hints"
    assert sorted(named - real) == []


@pytest.mark.skipif(not hasattr(Engine, "__getattr__"), reason="Engine.__getattr__ is not wired to the hints yet")
def test_the_engine_raises_the_hint() -> None:
    engine = Engine(accelerator="cpu", devices=1)
    with pytest.raises(AttributeError, match="all_gather") as info:
        engine.gather
    assert str(info.value).startswith("'Engine' object has no attribute 'gather'")
    assert not hasattr(engine, "is_main_process")

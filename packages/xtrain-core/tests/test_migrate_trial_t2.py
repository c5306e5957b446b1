"""``xtrain migrate`` defects of trial t2: a combined import statement lost its non-Lightning modules, and the hooks
of classes deriving from Lightning's through another class (or from ``BoringModel``) went unflagged."""

from __future__ import annotations

import ast

import pytest

pytest.importorskip("libcst")

from migrate_helpers import messages, run, runs
from xtrain.core._internal.migrate.source import migrate_python


def imported(code: str) -> set[str]:
    """The names the import statements of ``code`` bind at module level."""
    names: set[str] = set()
    for node in ast.parse(code).body:
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return names


# -- 1. combined import statements -----------------------------------------------------------------------------------
def test_combined_import_keeps_the_other_modules_and_runs() -> None:
    result = run("""\
        import os, sys, lightning.pytorch as pl  # setup


        class Model(pl.LightningModule):
            pass


        trainer = pl.Trainer
        here = os.getcwd()
        argv = sys.argv
    """)
    assert "import os, sys  # setup" in result.new
    assert "lightning" not in result.new
    namespace = runs(result.new)
    assert {"os", "sys", "Model", "trainer", "here"} <= set(namespace)


@pytest.mark.parametrize("statement, use, others", [
    ("import json, pytorch_lightning", "pytorch_lightning.Trainer", {"json"}),
    ("import lightning as L, os.path as osp", "L.Trainer", {"osp"}),
    ("import lightning.pytorch, json", "lightning.pytorch.Trainer", {"json"}),
    ("import json, lightning.pytorch as pl, os.path as osp", "pl.Trainer", {"json", "osp"}),
    ("import pytorch_lightning as pl, json", "pl.Trainer", {"json"}),
])
def test_every_combined_import_form_keeps_the_other_modules(statement: str, use: str, others: set[str]) -> None:
    result = run(f"{statement}\ntrainer = {use}\n")
    assert "lightning" not in result.new
    assert imported(result.new) == others | {"Trainer"}
    runs(result.new)


def test_from_import_beside_other_statements_on_one_line() -> None:
    result = run("""\
        import math; from lightning.pytorch import Trainer, seed_everything; import json
        import lightning as L; trainer = L.Trainer
        seed_everything(0)
        values = (math.pi, json.dumps(1), Trainer)
    """)
    assert "lightning" not in result.new
    assert {"math", "json", "Trainer", "seed_everything"} <= imported(result.new)
    namespace = runs(result.new)
    assert namespace["trainer"] is namespace["Trainer"]


def test_lightning_import_kept_for_a_flagged_use_keeps_the_other_modules_once() -> None:
    result = run("""\
        import os, lightning.pytorch as pl  # note
        trainer = pl.Trainer
        gc = pl.utilities.memory.garbage_collection_cuda
    """)
    lines = result.new.splitlines()
    assert "import os  # note" in lines
    assert "import lightning.pytorch as pl" in lines
    assert any("`import lightning.pytorch as pl` stays only for the flagged" in m for m in messages(result))
    compile(result.new, "<migrated>", "exec")


def test_combined_import_is_stable_on_a_second_run() -> None:
    once = run("import os, torch, lightning.pytorch as pl\ntrainer = pl.Trainer\n").new
    assert not migrate_python(once).changed


# -- 2. hooks of indirect LightningModule subclasses -----------------------------------------------------------------
def test_hooks_of_a_transitive_subclass_are_flagged() -> None:
    result = run("""\
        import lightning.pytorch as pl


        class Base(pl.LightningModule):
            pass


        class Middle(Base):
            pass


        class Leaf(Middle):
            def backward(self, loss):
                loss.backward()

            def training_epoch_end(self, outputs):
                pass

            def on_validation_model_zero_grad(self):
                pass
    """)
    found = messages(result)
    assert any(m.startswith("backward:") for m in found)
    assert any(m.startswith("training_epoch_end:") for m in found)
    assert any(m.startswith("on_validation_model_zero_grad:") for m in found)


def test_hooks_of_a_boring_model_subclass_and_its_subclass_are_flagged() -> None:
    result = run("""\
        from lightning.pytorch.demos.boring_classes import BoringModel


        class Boring(BoringModel):
            def training_epoch_end(self, outputs):
                pass


        class Boring2(Boring):
            def backward(self, loss):
                loss.backward()
    """)
    found = dict(result.attention)
    assert found[5].startswith("training_epoch_end:")
    assert found[10].startswith("backward:")


def test_a_demo_model_subclass_is_checked_like_a_lightning_module() -> None:
    result = run("""\
        from lightning.pytorch.demos import DemoModel


        class Model(DemoModel):
            def backward(self, loss):
                loss.backward()
    """)
    assert any(m.startswith("backward:") for m in messages(result))


def test_backward_of_an_autograd_function_is_not_flagged() -> None:
    result = run("""\
        import torch
        import lightning.pytorch as pl


        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * x

            @staticmethod
            def backward(ctx, grad):
                return grad


        class Net(torch.nn.Module):
            def backward(self, loss):
                pass


        trainer = pl.Trainer
    """)
    assert not any("backward" in m for m in messages(result))

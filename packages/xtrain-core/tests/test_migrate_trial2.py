"""``xtrain migrate`` defects a second outside trial found: try/except fallback imports, files with only ``*``
imports, classes without an ``__init__`` of their own, YAML ``init_args``, TrainerFn members, quoted annotations,
``trainer.strategy.lightning_module`` and the Lightning 1.x ``dataloader_idx`` of the training batch hooks."""

from __future__ import annotations

import argparse
import io
import textwrap
import typing
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from migrate_helpers import messages, run, runs
from xtrain.core._internal.migrate import installed
from xtrain.core._internal.migrate.config import migrate_yaml
from xtrain.core._internal.migrate.runner import run as run_cli
from xtrain.core._internal.migrate.source import migrate_python


# -- 1. try/except fallback imports ----------------------------------------------------------------------------------
def test_try_except_fallback_of_two_lightning_imports_collapses_to_the_xtrain_import() -> None:
    result = run("""\
        import os
        # the package was renamed
        try:
            import lightning.pytorch as pl
        except ImportError:
            import pytorch_lightning as pl


        class M(pl.LightningModule):
            pass
        """)
    assert result.new == textwrap.dedent("""\
        import os
        # the package was renamed
        from xtrain.core import TrainModule


        class M(TrainModule):
            pass
        """)
    assert runs(result.new)["M"].__mro__[1].__name__ == "TrainModule"  # type: ignore[attr-defined]
    assert not result.attention


def test_try_except_fallback_of_from_imports() -> None:
    result = run("""\
        try:
            from lightning.pytorch import LightningModule, Trainer
        except ModuleNotFoundError:
            from pytorch_lightning import LightningModule, Trainer


        class M(LightningModule):
            pass
        """)
    assert result.new.startswith("from xtrain.core import TrainModule, Trainer\n\n\nclass M(TrainModule):")
    runs(result.new)


def test_try_with_a_non_import_fallback_keeps_the_xtrain_import_where_it_runs() -> None:
    result = run("""\
        try:
            import lightning as L
        except ImportError:
            L = None


        class M(L.LightningModule):
            pass
        """)
    assert "try:\n    from xtrain.core import TrainModule\nexcept ImportError:\n    L = None\n" in result.new
    runs(result.new)


def test_a_flagged_use_keeps_the_lightning_import_in_both_branches() -> None:
    result = run("""\
        try:
            import lightning.pytorch as pl
        except ImportError:
            import pytorch_lightning as pl

        print(pl.__version__)
        """)
    body, _, handler = result.new.partition("except ImportError:")
    assert "import lightning.pytorch as pl" in body
    assert "import pytorch_lightning as pl" in handler
    assert any("pl.__version__" in m for m in messages(result))


def test_same_import_in_two_functions_binds_the_names_in_each() -> None:
    result = run("""\
        def make():
            import pytorch_lightning as pl
            return pl.Trainer(logger=False, enable_checkpointing=False)


        def base():
            import pytorch_lightning as pl
            return pl.LightningModule
        """)
    assert result.new.count("from xtrain.core import TrainModule, Trainer") == 2
    namespace = runs(result.new)
    assert namespace["base"]().__name__ == "TrainModule"  # type: ignore[operator]


def test_if_else_imports_bind_the_names_in_each_branch() -> None:
    result = run("""\
        import sys
        if sys.version_info >= (3, 0):
            import lightning.pytorch as pl
        else:
            import pytorch_lightning as pl
        base = pl.LightningModule
        """)
    assert result.new.count("from xtrain.core import TrainModule") == 2
    assert runs(result.new)["base"].__name__ == "TrainModule"  # type: ignore[attr-defined]


# -- 2. star imports -----------------------------------------------------------------------------------------------
def test_a_file_with_only_star_imports_is_flagged_and_fails_check(tmp_path: Path) -> None:
    code = "from lightning.pytorch import *\n\nt = Trainer(max_epochs=1)\n"
    result = migrate_python(code)
    assert result.attention and "import *" in result.attention[0][1]
    assert result.new.startswith("# xtrain migrate: `from lightning.pytorch import *`: import the names you use "
                                 "from xtrain.core")
    assert migrate_python(result.new).new == result.new  # the note above the file's first line is not repeated
    path = tmp_path / "star.py"
    path.write_text(code)
    out = io.StringIO()
    assert run_cli(argparse.Namespace(paths=[str(path)], check=True, diff=False, quiet=False), out) == 1
    assert "star.py:1:" in out.getvalue() and path.read_text() == code
    assert run_cli(argparse.Namespace(paths=[str(path)], check=False, diff=False, quiet=True), io.StringIO()) == 0
    assert path.read_text() == result.new
    out = io.StringIO()  # migrated, the file still imports Lightning: --check keeps failing on it
    assert run_cli(argparse.Namespace(paths=[str(path)], check=True, diff=False, quiet=False), out) == 1
    assert "0 would change" in out.getvalue() and "not migrated (1; a `*` import" in out.getvalue()


def test_star_import_of_a_submodule_names_its_xtrain_module() -> None:
    result = migrate_python("from pytorch_lightning.callbacks import *\n")
    assert "import the names you use from xtrain.core.callbacks instead" in messages(result)[0]


# -- 3. classes without their own __init__, SLURMEnvironment --------------------------------------------------------
def test_keywords_of_a_class_without_its_own_init_are_checked() -> None:
    pytest.importorskip("xtrain.strategies")
    assert not installed.accepts("xtrain.strategies.environments.SLURMEnvironment", "anything")
    result = run("""\
        from lightning.pytorch.plugins.environments import SLURMEnvironment
        env = SLURMEnvironment(anything=1)
        """)
    assert any(m.startswith("SLURMEnvironment(anything=) is not accepted by xtrain") for m in messages(result))


def test_slurm_requeue_arguments_are_removed_at_their_default_and_flagged_otherwise() -> None:
    pytest.importorskip("xtrain.strategies")
    result = run("""\
        import signal
        from lightning.pytorch.plugins.environments import SLURMEnvironment
        a = SLURMEnvironment(auto_requeue=True, requeue_signal=signal.SIGUSR1)
        b = SLURMEnvironment(requeue_signal=None)
        c = SLURMEnvironment(auto_requeue=False)
        d = SLURMEnvironment(requeue_signal=signal.SIGHUP)
        """)
    assert "a = SLURMEnvironment()\n" in result.new and "b = SLURMEnvironment()\n" in result.new
    found = messages(result)
    assert any(m.startswith("SLURMEnvironment(auto_requeue=False) is not accepted by xtrain: xtrain has no switch")
               and "scontrol requeue on SIGUSR1" in m for m in found)
    assert any(m.startswith("SLURMEnvironment(requeue_signal=signal.SIGHUP) is not accepted by xtrain: the signal "
                            "cannot be changed") for m in found)
    runs(result.new.replace("c = SLURMEnvironment(auto_requeue=False)", "").replace(
        "d = SLURMEnvironment(requeue_signal=signal.SIGHUP)", ""))


# -- 4. YAML --------------------------------------------------------------------------------------------------------
CONFIG = """\
trainer:
  resume_from_checkpoint: null
  logger:
    class_path: lightning.pytorch.loggers.CSVLogger
    init_args:
      save_dir: lightning_logs  # kept comment
  callbacks:
    - class_path: lightning.pytorch.callbacks.TQDMProgressBar
      init_args:
        refresh_rate: 5
    - class_path: lightning.pytorch.callbacks.RichProgressBar
      init_args:
        leave: true
    - class_path: lightning.pytorch.callbacks.EarlyStopping
      init_args:
        monitor: val_loss
  plugins:
    - class_path: lightning.pytorch.plugins.environments.SLURMEnvironment
      init_args:
        auto_requeue: true
"""


def test_yaml_init_args_follow_the_python_argument_rules() -> None:
    pytest.importorskip("xtrain.strategies")
    result = migrate_yaml(CONFIG)
    assert result.new == """\
trainer:
  logger:
    class_path: xtrain.core.loggers.CSVLogger
    init_args:
      save_dir: xtrain_logs  # kept comment
  callbacks:
    - class_path: xtrain.core.callbacks.ProgressBar
    - class_path: xtrain.core.callbacks.RichProgressBar
    - class_path: xtrain.core.callbacks.EarlyStopping
      init_args:
        monitor: val_loss
  plugins:
    - class_path: xtrain.strategies.environments.SLURMEnvironment
"""
    assert not result.attention
    assert result.counts["TQDMProgressBar(refresh_rate=) removed (the bar refreshes by time (refresh_interval, "
                         "seconds))"] == 1
    assert result.counts["lightning_logs/ -> xtrain_logs/"] == 1
    assert result.counts["trainer.resume_from_checkpoint: null removed"] == 1


def test_yaml_values_that_are_not_defaults_are_flagged() -> None:
    result = migrate_yaml("trainer:\n  resume_from_checkpoint: last.ckpt\n"
                          "  plugins:\n    - class_path: lightning.pytorch.plugins.environments.SLURMEnvironment\n"
                          "      init_args:\n        auto_requeue: false\n")
    found = messages(result)
    assert any(m.startswith("trainer.resume_from_checkpoint: Lightning 1.x: becomes ckpt_path=") for m in found)
    if installed.exists("xtrain.strategies.environments.SLURMEnvironment"):
        assert any(m.startswith("SLURMEnvironment(auto_requeue=false) is not accepted by xtrain") for m in found)


def test_yaml_that_is_not_a_lightning_config_keeps_lightning_logs() -> None:
    text = "paths:\n  logs: lightning_logs\n"
    assert migrate_yaml(text).new == text


# -- 5. TrainerFn, strategy.lightning_module, quoted annotations, batch hooks ---------------------------------------
def test_trainer_fn_members_become_strings_and_the_import_goes() -> None:
    result = run("""\
        from lightning.pytorch import Callback
        from lightning.pytorch.trainer.states import TrainerFn


        class C(Callback):
            def on_fit_start(self, trainer, pl_module):
                if trainer.state.fn == TrainerFn.FITTING or trainer.state.fn in (TrainerFn.VALIDATING.value,):
                    print(trainer.strategy.lightning_module)
        """)
    assert 'if trainer.state == "fit" or trainer.state in ("validate",):' in result.new
    assert "print(trainer.strategy.module)" in result.new
    assert "TrainerFn" not in result.new and "lightning" not in result.new
    assert not result.attention
    runs(result.new)


def test_trainer_fn_used_otherwise_keeps_its_import_and_note() -> None:
    result = run("""\
        import lightning.pytorch as pl
        from lightning.pytorch.trainer.states import TrainerFn

        ok = pl.Trainer
        fns = list(TrainerFn)
        fit = TrainerFn.FITTING
        """)
    assert "from lightning.pytorch.trainer.states import TrainerFn\n" in result.new
    assert 'fit = "fit"' in result.new
    assert any(m.startswith("TrainerFn: trainer.state is the plain string") for m in messages(result))


def test_quoted_annotations_are_rewritten_or_flagged() -> None:
    result = run("""\
        import pytorch_lightning as pl
        from lightning.pytorch import LightningModule


        def f(trainer: "pl.Trainer", m: "LightningModule", ms: "list[pl.LightningDataModule]") -> "pl.Callback":
            return trainer.callbacks[0]


        def g(x: "pl.utilities.grad_norm") -> None: ...
        """)
    assert ('def f(trainer: "Trainer", m: "TrainModule", ms: "list[DataModule]") -> "Callback":'
            in result.new)
    assert "from xtrain.core import " in result.new and "Trainer" in result.new.splitlines()[0]
    assert any(m.startswith('the quoted annotation "pl.utilities.grad_norm" names Lightning\'s') for m in
               messages(result))
    namespace = runs(result.new)
    hints = typing.get_type_hints(namespace["f"])  # type: ignore[arg-type]
    assert [t.__name__ for t in (hints["trainer"], hints["m"], hints["return"])] == ["Trainer", "TrainModule",
                                                                                     "Callback"]


def test_lightning_1x_dataloader_idx_of_training_batch_hooks_gets_a_default() -> None:
    result = run("""\
        import lightning.pytorch as pl


        class M(pl.LightningModule):
            def on_train_batch_end(self, outputs, batch, batch_idx, dataloader_idx):
                pass

            def on_train_batch_start(self, batch, batch_idx: int, dataloader_idx: int):
                pass

            def on_validation_batch_end(self, outputs, batch, batch_idx, dataloader_idx):
                pass


        class C(pl.Callback):
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx):
                pass

            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
                pass
        """)
    assert "def on_train_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):" in result.new
    assert "def on_train_batch_start(self, batch, batch_idx: int, dataloader_idx: int = 0):" in result.new
    assert "def on_validation_batch_end(self, outputs, batch, batch_idx, dataloader_idx):" in result.new
    assert ("def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):"
            in result.new)
    assert "def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):" in result.new
    namespace = runs(result.new)
    namespace["M"]().on_train_batch_end(None, None, 0)  # type: ignore[operator]


# -- 6. Lightning 1.x device counts in YAML ------------------------------------------------------------------------
def test_yaml_gpus_0_means_the_cpu_as_in_python() -> None:
    result = migrate_yaml("trainer:\n  gpus: 0  # no card\n  max_epochs: 3\n")
    assert result.new == "trainer:\n  accelerator: cpu  # no card\n  max_epochs: 3\n"
    assert result.counts["trainer.gpus: 0 -> trainer.accelerator: cpu (Lightning 1.x ran on the CPU)"] == 1
    assert not result.attention and not migrate_yaml(result.new).changed


def _python_trainer(arguments: str) -> dict[str, object]:
    import ast

    call = ast.parse(run(f"import pytorch_lightning as pl\nt = pl.Trainer({arguments})\n").new).body[-1].value
    assert isinstance(call, ast.Call)
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg is not None}


@pytest.mark.parametrize(("python", "yaml_lines"), [
    ("gpus=0", ["gpus: 0"]),
    ("gpus=None", ["gpus: null"]),
    ('gpus="0"', ["gpus: '0'"]),
    ("tpu_cores=0", ["tpu_cores: 0"]),
    ("num_processes=0", ["num_processes: 0"]),
    ("gpus=2", ["gpus: 2"]),
    ('accelerator="gpu", gpus=0', ["accelerator: gpu", "gpus: 0"]),
    ('gpus=2, accelerator="cpu"', ["gpus: 2", "accelerator: cpu"]),
    ('accelerator="ddp", gpus=0', ["accelerator: ddp", "gpus: 0"]),
])
def test_yaml_device_counts_become_what_the_python_call_becomes(python: str, yaml_lines: list[str]) -> None:
    yaml = pytest.importorskip("yaml")
    text = "trainer:\n" + "".join(f"  {line}\n" for line in yaml_lines)
    migrated = yaml.safe_load(migrate_yaml(text).new)["trainer"] or {}
    assert migrated == _python_trainer(python)


def test_yaml_gpus_with_devices_is_flagged_not_doubled() -> None:
    result = migrate_yaml("trainer:\n  gpus: 2\n  devices: 4\n")
    assert result.new == "trainer:\n  # xtrain migrate: trainer.gpus and trainer.devices are both given: keep devices " \
                         "and remove gpus\n  gpus: 2\n  devices: 4\n"
    assert [line for line, _ in result.attention] == [2]

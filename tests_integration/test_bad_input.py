"""Invalid configurations: each is the one ConfigError, before any process starts, naming the argument and the fix.

The table includes every case PyTorch Lightning's accelerator connector rejects (its number in
``shared/reference/anchors_api.md`` §3 is in the case id, ``L<n>``), with our message, plus our own. Cases whose
hardware is absent use :func:`xtrain.core.testing.simulate_devices` (the one allowed double: a device count).
Lightning cases we deliberately accept are listed in ``ACCEPTED`` with the reason, and tested as accepted.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import ConfigError, DataModule, EarlyStopping, ModelCheckpoint, Trainer
from xtrain.core.defaults import CPUAccelerator, LocalEnvironment, SingleDeviceStrategy, SinglePrecision
from xtrain.core.registry import ACCELERATORS, PRECISIONS, STRATEGIES
from xtrain.core.testing import TinyClassifier, simulate_devices, tiny_loaders


@dataclass(frozen=True)
class Case:
    """One invalid configuration: ``call`` must raise the ConfigError for ``argument`` whose text has ``fragment``."""

    id: str
    call: Callable[[Path], object]
    argument: str
    fragment: str
    needs: tuple[str, ...] = ()
    setup: Callable[[], AbstractContextManager[Any]] = nullcontext
    env: dict[str, str] = field(default_factory=dict)


def trainer(**kwargs: Any) -> Callable[[Path], object]:
    return lambda root: Trainer(**{"default_root_dir": root, **kwargs})


def simulated(name: str, count: int) -> Callable[[], AbstractContextManager[Any]]:
    return lambda: simulate_devices(ACCELERATORS.load(name), count)  # type: ignore[arg-type]


@contextmanager
def interactive() -> Iterator[None]:
    sys.ps1 = ">>> "  # what CPython sets in a REPL; xtrain reads it to know it is interactive
    try:
        yield
    finally:
        del sys.ps1


@contextmanager
def no_fork() -> Iterator[None]:
    original = multiprocessing.get_all_start_methods
    multiprocessing.get_all_start_methods = lambda: ["spawn"]  # a test double for an OS without fork
    try:
        yield
    finally:
        multiprocessing.get_all_start_methods = original


def fit(root: Path, *, model: Any = None, datamodule: Any = None, ckpt_path: str | None = None,
        **kwargs: Any) -> None:
    train, val = tiny_loaders()
    t = Trainer(default_root_dir=root, enable_progress_bar=False, enable_model_summary=False, logger=False,
                max_epochs=1, **kwargs)
    if datamodule is not None:
        t.fit(model or TinyClassifier(), train, datamodule=datamodule, ckpt_path=ckpt_path)
    else:
        t.fit(model or TinyClassifier(), train, val, ckpt_path=ckpt_path)


def strategy_instance(name: str, **kwargs: Any) -> Callable[[], Any]:
    return lambda: STRATEGIES.load(name)(**kwargs)  # type: ignore[call-arg]


class Manual(TinyClassifier):
    automatic_optimization = False


CASES = [
    # -- accelerator -----------------------------------------------------------------------------------------------
    Case("L1-unknown-accelerator", trainer(accelerator="invalid"), "accelerator", "not a registered accelerator"),
    Case("accelerator-wrong-type", trainer(accelerator=3), "accelerator", "must be a registered name"),
    Case("L6-cuda-without-gpu", trainer(accelerator="cuda"), "accelerator", "not available on this machine",
         needs=("cuda",)),
    Case("L7-gpu-without-gpu", trainer(accelerator="gpu"), "accelerator", "not available on this machine",
         needs=("gpu",)),
    Case("L8-tpu-without-xla", trainer(accelerator="tpu"), "accelerator", "not available on this machine",
         needs=("tpu",)),
    Case("mps-without-mps", trainer(accelerator="mps"), "accelerator", "not available", needs=("mps",)),
    Case("xpu-without-xpu", trainer(accelerator="xpu"), "accelerator", "not available", needs=("xpu",)),
    Case("L20-accelerator-set-twice", lambda r: Trainer(strategy=SingleDeviceStrategy(accelerator=CPUAccelerator()),
                                                        accelerator="cpu", default_root_dir=r),
         "accelerator", "also inside strategy"),
    Case("L21-ddp-instance-with-cpu-vs-cuda", lambda r: Trainer(
        strategy=STRATEGIES.load("ddp")(accelerator=CPUAccelerator()), accelerator="cuda", default_root_dir=r),
        "accelerator", "also inside strategy", needs=("ddp",)),
    # -- strategy --------------------------------------------------------------------------------------------------
    Case("L2-unknown-strategy", trainer(strategy="cocofruit"), "strategy", "not a registered strategy"),
    Case("L2-strategy-wrong-type", trainer(strategy=object()), "strategy", "must be a registered name"),
    Case("L26-deepspeed-not-provided", trainer(strategy="deepspeed"), "strategy", "not a registered strategy"),
    Case("L3-bagua-without-bagua", trainer(strategy="bagua"), "strategy", "bagua"),
    Case("L3-horovod-without-horovod", trainer(strategy="horovod"), "strategy", "horovod"),
    Case("single-device-two-devices", trainer(strategy="single_device", devices=2), "devices",
         "more than strategy='single_device' drives"),
    Case("dp-on-several-cpus", trainer(strategy="dp", accelerator="cpu", devices=2), "devices", "strategy='dp'",
         needs=("dp",)),
    Case("ddp2-on-several-cpus", trainer(strategy="ddp2", accelerator="cpu", devices=2), "devices", "ddp2",
         needs=("ddp2",)),
    Case("dp-multi-node", trainer(strategy="dp", accelerator="cpu", num_nodes=2), "num_nodes", "one machine",
         needs=("dp",)),
    Case("L23-ddp-interactive", trainer(strategy="ddp", devices=2), "strategy", "interactive session",
         needs=("ddp",), setup=interactive),
    Case("L23-ddp-spawn-interactive", trainer(strategy="ddp_spawn", devices=2), "strategy", "interactive session",
         needs=("ddp_spawn",), setup=interactive),
    Case("L24-fork-unavailable", trainer(strategy="ddp_notebook", devices=2), "strategy", "not available on this "
         "platform", needs=("ddp_notebook",), setup=no_fork),
    Case("L25-mps-with-ddp", trainer(accelerator="mps", devices=2, strategy="ddp"), "strategy",
         "declares no torch.distributed backend", needs=("mps", "ddp"), setup=simulated("mps", 2)),
    Case("L27-tpu-with-ddp", trainer(accelerator="xla", devices=1, strategy="ddp"), "strategy",
         "cannot run on accelerator='xla'", needs=("xla", "ddp"), setup=simulated("xla", 1)),
    Case("ddp-start-method", lambda r: strategy_instance("ddp", start_method="forkserver")(), "start_method",
         "not a DDP start method", needs=("ddp",)),
    # -- devices -----------------------------------------------------------------------------------------------------
    Case("L9-devices-zero", trainer(devices=0), "devices", "positive count"),
    Case("L9-devices-zero-string", trainer(devices="0"), "devices", "ambiguous"),
    Case("L9-devices-empty", trainer(devices=[]), "devices", "is empty"),
    Case("devices-negative", trainer(devices=-2), "devices", "positive count"),
    Case("L13-devices-float", trainer(devices=0.5), "devices", "must not be a float"),
    Case("L13-devices-bool", trainer(devices=True), "devices", "must not be a bool"),
    Case("devices-ambiguous-string", trainer(devices="2"), "devices", "ambiguous"),
    Case("L11-duplicate-gpus", trainer(accelerator="cuda", devices=[0, 0]), "devices", "more than once",
         needs=("cuda",), setup=simulated("cuda", 2)),
    Case("L12-missing-gpu-index", trainer(accelerator="cuda", devices=[0, 5]), "devices", "index(es) [5]",
         needs=("cuda",), setup=simulated("cuda", 2)),
    Case("L12-too-many-gpus", trainer(accelerator="cuda", devices=3), "devices", "this machine has 2",
         needs=("cuda",), setup=simulated("cuda", 2)),
    Case("L13-gpu-index-as-string", trainer(accelerator="cuda", devices=["0"]), "devices", "int device indices",
         needs=("cuda",), setup=simulated("cuda", 2)),
    Case("L31-torchrun-world-mismatch", trainer(accelerator="cpu", devices=3, strategy="ddp"), "devices",
         "torchrun started 2 per node", needs=("ddp", "torchelastic"),
         env={"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0",
              "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}),
    Case("L30-slurm-tasks-mismatch", trainer(accelerator="cpu", devices=2, strategy="ddp"), "devices",
         "SLURM started 4 per node", needs=("ddp", "slurm"),
         env={"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "4", "SLURM_NNODES": "1", "SLURM_JOB_NAME": "train",
              "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_ID": "1",
              "SLURM_NODELIST": "node1", "SLURM_STEP_ID": "0"}),
    # -- num_nodes ---------------------------------------------------------------------------------------------------
    Case("L14-num-nodes-zero", trainer(num_nodes=0), "num_nodes", "positive int"),
    Case("L14-num-nodes-negative", trainer(num_nodes=-1), "num_nodes", "positive int"),
    Case("num-nodes-string", trainer(num_nodes="2"), "num_nodes", "positive int"),
    # -- precision and plugins ----------------------------------------------------------------------------------------
    Case("L4-precision-int", trainer(precision=12), "precision", "not a registered precision"),
    Case("L4-precision-string", trainer(precision="invalid"), "precision", "not a registered precision"),
    Case("L17-precision-and-plugin", trainer(precision="32-true", plugins=SinglePrecision()), "precision",
         "also as plugins"),
    Case("L18-two-precision-plugins", lambda r: Trainer(plugins=[SinglePrecision(), PRECISIONS.create("64-true")],
                                                        default_root_dir=r), "plugins", "more than one Precision",
         needs=("64-true",)),
    Case("L19-plugin-wrong-type", trainer(plugins=[object()]), "plugins", "is not a plugin"),
    Case("two-environments", trainer(plugins=[LocalEnvironment(), LocalEnvironment()]), "plugins",
         "more than one ClusterEnvironment"),
    Case("L16-fsdp-64-true", trainer(strategy="fsdp", precision="64-true"), "precision", "not supported by",
         needs=("fsdp", "64-true")),
    Case("xla-64-true", trainer(accelerator="xla", precision="64-true", strategy="single_xla"), "precision",
         "not supported by accelerator='xla'", needs=("xla", "64-true"), setup=simulated("xla", 1)),
    Case("mps-64-true", trainer(accelerator="mps", precision="64-true"), "precision",
         "not supported by accelerator='mps'", needs=("mps", "64-true"), setup=simulated("mps", 1)),
    # -- length, limits, clipping, other arguments ---------------------------------------------------------------
    Case("L32-clip-algorithm", trainer(gradient_clip_algorithm="foo"), "gradient_clip_algorithm", "not a clipping"),
    Case("L32-clip-value-type", trainer(gradient_clip_val="x"), "gradient_clip_val", "non-negative number"),
    Case("clip-value-negative", trainer(gradient_clip_val=-1.0), "gradient_clip_val", "non-negative number"),
    Case("limit-fraction", trainer(limit_train_batches=1.5), "limit_train_batches", "fraction outside"),
    Case("limit-negative", trainer(limit_val_batches=-1), "limit_val_batches", "negative number"),
    Case("limit-type", trainer(limit_test_batches="all"), "limit_test_batches", "int number of batches"),
    Case("val-check-zero", trainer(val_check_interval=0.0), "val_check_interval", "float in (0, 1]"),
    Case("val-check-every-zero", trainer(check_val_every_n_epoch=0), "check_val_every_n_epoch", "int >= 1"),
    Case("max-epochs", trainer(max_epochs=-2), "max_epochs", "int >= -1"),
    Case("max-steps", trainer(max_steps=2.5), "max_steps", "int >= -1"),
    Case("max-time", trainer(max_time="forever"), "max_time", "'DD:HH:MM:SS'"),
    Case("accumulate-zero", trainer(accumulate_grad_batches=0), "accumulate_grad_batches", "int >= 1"),
    Case("log-every-zero", trainer(log_every_n_steps=0), "log_every_n_steps", "int >= 1"),
    Case("sanity-steps", trainer(num_sanity_val_steps=-3), "num_sanity_val_steps", "int >= -1"),
    Case("fast-dev-run", trainer(fast_dev_run=-1), "fast_dev_run", "int >= 0"),
    Case("callbacks-type", trainer(callbacks=[object()]), "callbacks", "is not a Callback"),
    Case("logger-type", trainer(logger="tb"), "logger", "is not a Logger"),
    Case("root-dir-type", trainer(default_root_dir=3), "default_root_dir", "must be a path"),
    Case("deterministic", trainer(deterministic="yes"), "deterministic", "not a valid setting"),
    Case("checkpoint-mode", lambda r: ModelCheckpoint(mode="best"), "mode", "not a ModelCheckpoint mode"),
    Case("early-stopping-mode", lambda r: EarlyStopping(monitor="x", mode="up"), "mode", "not an EarlyStopping"),
    Case("early-stopping-patience", lambda r: EarlyStopping(monitor="x", patience=-1), "patience", "non-negative"),
    # -- what fit() is given (checked before any process starts) -------------------------------------------------
    Case("ckpt-path-missing", lambda r: fit(r, ckpt_path=str(r / "missing.ckpt"), strategy="ddp", devices=2,
                                            accelerator="cpu"), "ckpt_path", "does not exist", needs=("ddp",)),
    Case("ckpt-path-best-none", lambda r: fit(r, ckpt_path="best"), "ckpt_path", "no best checkpoint"),
    Case("model-type", lambda r: fit(r, model=torch.nn.Linear(2, 2)), "model", "is not a TrainModule"),
    Case("datamodule-and-loaders", lambda r: fit(r, datamodule=DataModule()), "datamodule", "together with"),
    Case("manual-optimization-clipping", lambda r: fit(r, model=Manual(), gradient_clip_val=1.0),
         "gradient_clip_val", "manual optimization"),
    Case("manual-optimization-accumulation", lambda r: fit(r, model=Manual(), accumulate_grad_batches=2),
         "accumulate_grad_batches", "manual optimization"),
    # -- monitor keys that are never logged: found at the first check (the keys exist only once training logs)
    Case("checkpoint-monitor-never-logged", lambda r: fit(r, callbacks=[ModelCheckpoint(monitor="val_los")]),
         "monitor", "is not among the logged metrics at this save point"),
    Case("early-stopping-monitor-never-logged", lambda r: fit(r, callbacks=[EarlyStopping(monitor="val_acc_")]),
         "monitor", "was never logged"),
]


def _children() -> set[int]:
    mine = str(os.getpid())
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == mine:
            found.add(int(stat.parent.name))
    return found


def test_the_table_has_at_least_forty_cases() -> None:
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_invalid_configuration(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = [n for n in case.needs if not any(n in r for r in (ACCELERATORS, STRATEGIES, PRECISIONS))
               and n not in ("torchelastic", "slurm")]
    if missing:
        pytest.skip(f"{missing} not installed here")
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    before = _children()
    with ExitStack() as stack:
        stack.enter_context(case.setup())
        with pytest.raises(ConfigError) as info:
            case.call(tmp_path)
    message = str(info.value)
    assert message.startswith(f"{case.argument}="), message
    assert case.fragment in message, message
    assert "Fix:" in message, message
    assert _children() <= before, "a process was started before the configuration was refused"


ACCEPTED = {
    "L5: precision=16 on CPU": (lambda r: Trainer(precision=16, accelerator="cpu", default_root_dir=r),
                                "runs float16 autocast with a gradient scaler on CPU (warning names 16-mixed)"),
    "L10: accelerator='cpu', devices=-1": (lambda r: Trainer(accelerator="cpu", devices=-1, default_root_dir=r),
                                           "one process per CPU core"),
    "L10: accelerator='cpu', devices='0,1'": (lambda r: Trainer(accelerator="cpu", devices="0,1",
                                                                default_root_dir=r), "two processes"),
    "L15: accelerator='cpu', strategy='fsdp'": (lambda r: Trainer(accelerator="cpu", strategy="fsdp", devices=2,
                                                                  default_root_dir=r), "FSDP2 runs on CPU with gloo"),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_lightning_refusals_we_accept_on_purpose(name: str, tmp_path: Path) -> None:
    build, why = ACCEPTED[name]
    if "fsdp" in name and "fsdp" not in STRATEGIES:
        pytest.skip("fsdp needs xtrain-strategies with FSDP")
    if ("precision=16" in name and "16-mixed" not in PRECISIONS) or ("devices" in name and "ddp" not in STRATEGIES):
        pytest.skip("needs xtrain-precision / xtrain-strategies")
    with pytest.warns(UserWarning, match="means precision='16-mixed'") if "precision=16" in name else nullcontext():
        assert isinstance(build(tmp_path), Trainer), why

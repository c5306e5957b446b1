"""Restores are all or nothing, corruption is caught, malformed input is a named CheckpointError, and output
directories are checked before a run starts."""

from __future__ import annotations

import copy
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from checkpoint_helpers import data_dir, quiet_trainer, to_sharded, train_full
from xtrain.core import Callback, CheckpointError, ConfigError, Engine, ModelCheckpoint, Trainer, TrainModule
from xtrain.core.checkpoint_reader import read_checkpoint
from xtrain.core.defaults.torch_io import TorchCheckpointIO
from xtrain.core.testing import TinyClassifier, tiny_dataset, tiny_loaders


@pytest.fixture(scope="module")
def genuine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_full(tmp_path_factory.mktemp("genuine"))[0]


def _tensors(state: Any) -> list[tuple[str, Any]]:
    """Every leaf of a nested state, tensors cloned, in order: what 'unchanged' is compared on."""
    if isinstance(state, torch.Tensor):
        return [("", state.detach().clone())]
    if isinstance(state, dict):
        return [(f"{k}.{p}", v) for k, value in state.items() for p, v in _tensors(value)]
    if isinstance(state, (list, tuple)):
        return [(f"{i}.{p}", v) for i, value in enumerate(state) for p, v in _tensors(value)]
    return [("", copy.deepcopy(state))]


def _same(a: list[tuple[str, Any]], b: list[tuple[str, Any]]) -> bool:
    return len(a) == len(b) and all(
        ka == kb and (torch.equal(va, vb) if isinstance(va, torch.Tensor) else va == vb)
        for (ka, va), (kb, vb) in zip(a, b, strict=True))


class Snapshot(Callback):
    """Records the whole run state just before a restore starts (after set-up), and again on demand.

    The optimizers and schedulers are configured after the ``on_load_checkpoint`` hooks (Lightning's order), so
    they are compared by what a restore would load into them: their per-parameter state and step counts.
    """

    def __init__(self) -> None:
        self.before: list[tuple[str, Any]] | None = None
        self.trainer: Trainer | None = None

    def state(self, trainer: Trainer) -> list[tuple[str, Any]]:
        return _tensors({
            "module": trainer.strategy.module.state_dict(),
            "optimizers": [opt.state_dict()["state"] for opt in trainer.optimizers if opt.state],
            "schedulers": [c.scheduler.state_dict() for c in trainer.lr_scheduler_configs
                           if getattr(c.scheduler, "last_epoch", 0) > 0],
            "loops": trainer._progress.state_dict(),
            "callbacks": [cb.state_dict() for cb in trainer.callbacks],
        })

    def on_load_checkpoint(self, trainer: Trainer, module: TrainModule, checkpoint: dict[str, Any]) -> None:
        self.trainer = trainer
        self.before = self.state(trainer)


class Scheduled(TinyClassifier):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=0.01)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1)}


class Wider(TinyClassifier):
    def __init__(self) -> None:
        super().__init__(classes=6)


class Extra(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(4, 2)


class TwoGroups(TinyClassifier):
    def configure_optimizers(self) -> Any:
        return torch.optim.SGD([{"params": self.net[0].parameters()}, {"params": self.net[3].parameters()}], lr=0.1)


def _edited(genuine: Path, tmp_path: Path, edit: Any) -> Path:
    checkpoint = torch.load(genuine, weights_only=True)
    edit(checkpoint)
    path = tmp_path / "edited.ckpt"
    torch.save(checkpoint, path)
    return path


CASES: dict[str, tuple[type[TinyClassifier], Any, str]] = {
    "another shape": (Wider, None, r"net.3.weight: checkpoint \(4, 32\) vs model \(6, 32\)"),
    "missing key": (Extra, None, "missing head.weight, head.bias"),
    "unexpected key": (TinyClassifier, lambda c: c["state_dict"].update(extra=torch.ones(1)), "unexpected extra"),
    "param groups": (TwoGroups, None, "1 parameter group.s. vs optimizer 2"),
    "malformed loops": (TinyClassifier, lambda c: c["loops"].update(epoch="one"), "loops: epoch not whole numbers"),
    "optimizer count": (TinyClassifier, lambda c: c["optimizer_states"].append({}), "2 optimizer state"),
    "optimizer state shape": (TinyClassifier, lambda c: c["optimizer_states"][0]["state"].update(
        {"net.0.weight": {"momentum_buffer": torch.ones(3, 3)}}), r"momentum_buffer: checkpoint \(3, 3\)"),
    "callback state type": (TinyClassifier, lambda c: c.update(callbacks=[1]), "callbacks: a list"),
    "missing loop counter": (TinyClassifier, lambda c: c["loops"].pop("total_batches"),
                             "loops: total_batches missing"),
    "optimizer field kinds": (TinyClassifier, lambda c: c["optimizer_states"][0].update(state={
        "net.0.weight": {"step": torch.tensor(3.0)}, "net.0.bias": {"step": 2.5}}),
        r"fields whose kind differs between parameters: step \(number, tensor\)"),
    "python rng gauss": (TinyClassifier, lambda c: c["rng"][0]["python"].__setitem__(2, [1]),
                         "rng: TypeError: the Python generator's cached gauss is a list"),
    "sampler seed missing": (TinyClassifier, lambda c: c["sampler"].pop("epoch_seed"), "sampler: .* is not"),
    "optimizer hyperparameter missing": (TinyClassifier, lambda c: c["optimizer_states"][0]["param_groups"][0].pop(
        "lr"), "group 0: lr missing"),
    "optimizer state flattened": (TinyClassifier, lambda c: _flattened_buffer(c),
                                  r"net.0.weight.momentum_buffer: checkpoint \(\d+,\) vs parameter"),
    "by-name mark": (TinyClassifier, lambda c: c["optimizer_states"][0].update(xtrain_keyed_by_name="yes"),
                     "xtrain_keyed_by_name is 'yes', not True"),
    "scheduler states": (TinyClassifier, lambda c: c.update(lr_schedulers=2.5),
                         "lr_schedulers: not a collection of state dicts"),
    # Found by an outside trial with hostile files: each loaded half the weights, or failed only at the next step.
    "meta tensor": (TinyClassifier, lambda c: c["state_dict"].update({"net.3.bias": torch.empty(4, device="meta")}),
                    "net.3.bias: checkpoint holds a meta tensor .no data., the model a dense one"),
    "sparse tensor": (TinyClassifier, lambda c: c["state_dict"].update({"net.3.bias": torch.zeros(4).to_sparse()}),
                      "net.3.bias: checkpoint holds a torch.sparse_coo tensor, the model a dense one"),
    "learning rate not finite": (TinyClassifier, lambda c: c["optimizer_states"][0]["param_groups"][0].update(
        lr=float("nan")), "group 0: lr of another type than the optimizer's, or not finite"),
    "learning rate negative": (TinyClassifier, lambda c: c["optimizer_states"][0]["param_groups"][0].update(
        lr=-0.1, weight_decay=-1e-4), "group 0: lr, weight_decay negative where the optimizer's is not"),
    "batches beyond the run's": (TinyClassifier, lambda c: c["loops"].update(batches_in_epoch=10**6),
                                 "loops: batches_in_epoch=1000000 is more than the run's total_batches=2"),
    "momentum buffers as scalars": (TinyClassifier, lambda c: _every_buffer(c, torch.tensor(0.0)),
                                    r"net.0.weight.momentum_buffer: checkpoint \(\) vs parameter \(32, 16\)"),
    "step a list": (TinyClassifier, lambda c: _every_buffer(c, None, step=[1]), "net.0.weight.step: a list"),
}


def _every_buffer(checkpoint: dict[str, Any], buffer: torch.Tensor | None, **fields: Any) -> None:
    """Give every parameter a momentum buffer (``None``: in its own shape) and ``fields``."""
    state = checkpoint["optimizer_states"][0]["state"]
    for name, value in checkpoint["state_dict"].items():
        state[name] = {"momentum_buffer": torch.zeros_like(value) if buffer is None else buffer, **fields}


def _flattened_buffer(checkpoint: dict[str, Any]) -> None:
    """Momentum buffers in their parameters' shapes, but one flattened (the other checks see nothing wrong)."""
    state = checkpoint["optimizer_states"][0]["state"]
    for name, value in checkpoint["state_dict"].items():
        state[name] = {"momentum_buffer": torch.zeros_like(value)}
    state["net.0.weight"]["momentum_buffer"] = state["net.0.weight"]["momentum_buffer"].flatten()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_restore_that_does_not_fit_changes_nothing(case: str, genuine: Path, tmp_path: Path) -> None:
    cls, edit, expected = CASES[case]
    path = _edited(genuine, tmp_path, edit) if edit is not None else genuine
    snapshot = Snapshot()
    module = cls()
    with pytest.raises(CheckpointError, match=expected) as info:
        quiet_trainer(tmp_path, callbacks=[snapshot]).fit(module, tiny_loaders(n=32)[0], ckpt_path=path)
    message = str(info.value)
    assert str(path) in message and "nothing was loaded" in message and "Fix:" in message
    assert snapshot.trainer is not None and snapshot.before is not None
    assert _same(snapshot.state(snapshot.trainer), snapshot.before), "a failed restore changed the run's state"
    assert module.losses == [], "training started"


def test_hyperparameters_are_the_suggested_fix(genuine: Path, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"hyperparameters \{.*'classes': 4"):
        quiet_trainer(tmp_path).fit(Wider(), tiny_loaders(n=32)[0], ckpt_path=genuine)


def test_a_callback_refusing_its_state_rolls_the_others_back(genuine: Path, tmp_path: Path) -> None:
    class Counter(Callback):
        def __init__(self, key: str, fail: bool) -> None:
            self.key, self.fail, self.count = key, fail, 0

        @property
        def state_key(self) -> str:
            return self.key

        def state_dict(self) -> dict[str, Any]:
            return {"count": self.count}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            if self.fail and state["count"] == 5:
                raise ValueError("not mine")
            self.count = state["count"]

    path = _edited(genuine, tmp_path, lambda c: c["callbacks"].update(a={"count": 5}, b={"count": 5}))
    first, second = Counter("a", fail=False), Counter("b", fail=True)
    module = TinyClassifier()
    before = _tensors(module.state_dict())
    with pytest.raises(CheckpointError, match="callback 'b' refused its saved state"):
        quiet_trainer(tmp_path, callbacks=[first, second]).fit(module, tiny_loaders(n=32)[0], ckpt_path=path)
    assert first.count == 0 and second.count == 0
    assert _same(_tensors(module.state_dict()), before)


def test_a_weights_only_checkpoint_cannot_resume_a_fit(genuine: Path, tmp_path: Path) -> None:
    path = _edited(genuine, tmp_path, lambda c: [c.pop("optimizer_states"), c.pop("loops")])
    with pytest.raises(CheckpointError, match=r"holds weights only .*load_from_checkpoint") as info:
        quiet_trainer(tmp_path).fit(TinyClassifier(), tiny_loaders(n=32)[0], ckpt_path=path)
    assert str(path) in str(info.value)
    quiet_trainer(tmp_path).validate(TinyClassifier(), tiny_loaders(n=32)[1], ckpt_path=path)  # evaluating is fine


@pytest.mark.parametrize("content", ["text", "random", "empty", "format_version '1'", "world_size -1", "no layout",
                                     "manifest list", "tensor", "truncated"])
def test_malformed_files_are_named_checkpoint_errors(content: str, genuine: Path, tmp_path: Path) -> None:
    path = tmp_path / "bad.ckpt"
    edits = {"format_version '1'": lambda c: c["xtrain"].update(format_version="1"),
             "world_size -1": lambda c: c["xtrain"].update(world_size=-1),
             "no layout": lambda c: c["xtrain"].pop("layout"), "manifest list": lambda c: c.update(xtrain=[1])}
    if content == "text":
        path.write_text("epoch: 3\nweights: lots\n")
    elif content == "random":
        path.write_bytes(random.Random(0).randbytes(5000))
    elif content == "empty":
        path.write_bytes(b"")
    elif content == "tensor":
        torch.save(torch.ones(3), path)
    elif content == "truncated":
        path.write_bytes(genuine.read_bytes()[:3000])
    else:
        path = _edited(genuine, tmp_path, edits[content])
    with pytest.raises(CheckpointError) as info:
        quiet_trainer(tmp_path).fit(TinyClassifier(), tiny_loaders(n=32)[0], ckpt_path=path)
    assert str(path) in str(info.value)


def _storage_offset(path: Path) -> int:
    """An offset inside the bytes of a tensor storage (past its local zip header)."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if "/data/" in i.filename and i.file_size > 100)
    raw = path.read_bytes()
    name_len, extra_len = struct.unpack_from("<HH", raw, info.header_offset + 26)
    return info.header_offset + 30 + name_len + extra_len + 50


def test_one_flipped_byte_is_caught_in_both_layouts(genuine: Path, tmp_path: Path) -> None:
    full = tmp_path / "flipped.ckpt"
    data = bytearray(genuine.read_bytes())
    data[_storage_offset(genuine)] ^= 0x01
    full.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="does not match the CRC-32 written with it") as info:
        read_checkpoint(full)
    assert str(full) in str(info.value)
    plain = tmp_path / "plain.ckpt"  # written by torch.save itself: its per-record CRCs are checked
    torch.save(torch.load(genuine, weights_only=True), plain)
    data = bytearray(plain.read_bytes())
    data[_storage_offset(plain)] ^= 0x01
    plain.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="tensor storage"):
        read_checkpoint(plain)
    unverified = read_checkpoint(full, verify=False)  # the opt-out reads it: torch itself does not notice
    assert any(not torch.equal(v, read_checkpoint(genuine)["state_dict"][k])
               for k, v in unverified["state_dict"].items())

    sharded = to_sharded(genuine, tmp_path / "sharded.ckpt")
    shard = next(data_dir(sharded).glob("*.distcp"))
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    shard.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="does not match the checksum") as info:
        read_checkpoint(sharded)
    assert str(shard) in str(info.value)


def test_checksums_can_be_turned_off(tmp_path: Path) -> None:
    module = TinyClassifier()
    quiet_trainer(tmp_path, plugins=[TorchCheckpointIO(checksums=False)]).fit(module, tiny_loaders(n=32)[0])
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert read_checkpoint(last)["xtrain"]["checksums"] == "none"
    quiet_trainer(tmp_path, max_steps=3).fit(TinyClassifier(), tiny_loaders(n=32)[0], ckpt_path=last)


def test_the_manifest_names_the_distributions_that_wrote_it(genuine: Path) -> None:
    meta = read_checkpoint(genuine)["xtrain"]
    assert meta["checksums"] == "crc32"
    for role in ("accelerator", "strategy", "precision", "checkpoint_io"):
        assert meta["distributions"][role]["name"] == "xtrain-core", role
        assert meta["distributions"][role]["version"] == meta["versions"]["xtrain-core"]


def test_the_manifest_of_first_party_plugins_reads_no_other_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scanning every installed distribution's metadata took about 1.5 s at the first save of each process."""
    import importlib.metadata

    from xtrain.core._internal import manifest, versions

    def scan_all(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("every installed distribution was read")

    monkeypatch.setattr(importlib.metadata, "packages_distributions", scan_all)
    monkeypatch.setattr(importlib.metadata, "distributions", scan_all)
    manifest.distribution_of.cache_clear()
    manifest._packages.cache_clear()
    versions.xtrain_versions.cache_clear()
    try:
        for module, name in (("xtrain.core.defaults.torch_io", "xtrain-core"), ("xtrain.strategies.ddp",
                                                                                 "xtrain-strategies")):
            assert manifest.distribution_of(module) == {"name": name, "version": importlib.metadata.version(name)}
        found = versions.xtrain_versions()
        assert {"xtrain-core", "xtrain-strategies", "torch"} <= set(found), found
    finally:
        manifest.distribution_of.cache_clear()
        versions.xtrain_versions.cache_clear()


def test_last_names_its_file_and_warns_about_another_precision(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    _, _ = train_full(tmp_path)
    last = tmp_path / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, weights_only=True)
    checkpoint["xtrain"]["precision"] = "bf16-mixed"
    torch.save(checkpoint, last)
    caplog.set_level("INFO", logger="xtrain")
    with pytest.warns(UserWarning, match="precision: checkpoint 'bf16-mixed' vs this run '32-true'"):
        quiet_trainer(tmp_path, max_steps=3).fit(TinyClassifier(), tiny_loaders(n=64)[0], ckpt_path="last")
    assert str(last) in caplog.text


@pytest.mark.parametrize("where", ["default_root_dir", "dirpath", "read-only"])
def test_output_directories_are_checked_before_anything_starts(where: str, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    module = TinyClassifier()
    if where == "default_root_dir":
        trainer = quiet_trainer(blocker)
        argument = "default_root_dir"
    elif where == "dirpath":
        trainer = quiet_trainer(tmp_path, callbacks=[ModelCheckpoint(dirpath=blocker / "ckpts")])
        argument = r"ModelCheckpoint\(dirpath=...\)"
    else:
        trainer = quiet_trainer(Path("/proc/xtrain-cannot-write-here"))
        argument = "default_root_dir"
    with pytest.raises(ConfigError, match=argument) as info:
        trainer.fit(module, tiny_loaders(n=32)[0])
    assert module.losses == [], "training started before the check"
    assert "not writable" in str(info.value) or "not a directory" in str(info.value)


_DISK_FULL = """
import resource, signal, sys, torch
from pathlib import Path
from xtrain.core.defaults.torch_io import TorchCheckpointIO
from xtrain.core import CheckpointError
path = Path(sys.argv[1])
io = TorchCheckpointIO()
io.save_checkpoint({"w": torch.ones(1000)}, path)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
try:
    io.save_checkpoint({"w": torch.zeros(1_000_000)}, path)
except CheckpointError as err:
    print("ERROR", err)
"""


def test_a_full_disk_is_a_named_error_and_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_DISK_FULL), str(path)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out.startswith("ERROR") and str(path) in out and "disk is full" in out
    assert "needs about 400" in out  # 1e6 float32: 4,000,000 bytes and a little more
    assert torch.equal(read_checkpoint(path)["w"], torch.ones(1000)), "the previous checkpoint was damaged"
    assert os.listdir(tmp_path) == ["last.ckpt"], "a temporary file was left"


def test_engine_load_is_all_or_nothing(tmp_path: Path) -> None:
    engine = Engine(accelerator="cpu", devices=1)
    engine.launch()
    first = TinyClassifier()
    model, optimizer = engine.setup(first, torch.optim.Adam(first.parameters()))
    engine.save(tmp_path / "e.ckpt", {"model": model, "optimizer": optimizer})
    other = engine.setup(Wider())
    before = _tensors(other.state_dict())
    with pytest.raises(CheckpointError, match=r"model: net.3.weight: checkpoint \(4, 32\) vs model \(6, 32\)"):
        engine.load(tmp_path / "e.ckpt", {"model": other, "missing": {}})
    assert _same(_tensors(other.state_dict()), before)


_SHARDED_DISK_FULL = """
import resource, signal, sys, torch, warnings
from pathlib import Path
from xtrain.core import CheckpointError, Engine
from xtrain.core.sharded_saver import ShardedSaver
warnings.simplefilter("ignore")
path = Path(sys.argv[1])
engine = Engine(accelerator="cpu", devices=1)
engine.launch()
saver = ShardedSaver(engine.strategy)
meta = {"format_version": 1, "strategy": "t", "world_size": 1, "layout": "sharded"}
saver.save({"xtrain": meta, "state_dict": {"w": torch.ones(1000)}}, path)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
try:
    saver.save({"xtrain": meta, "state_dict": {"w": torch.zeros(1_000_000)}}, path)
except CheckpointError as err:
    print("ERROR", err)
"""


def test_a_full_disk_during_a_sharded_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_SHARDED_DISK_FULL), str(path)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out.startswith("ERROR") and str(path) in out and "disk is full" in out and "needs about 400" in out
    assert torch.equal(read_checkpoint(path)["state_dict"]["w"], torch.ones(1000))
    assert len([p for p in path.iterdir() if p.name.startswith("shards-")]) == 1, "the failed save's data was left"


class Factored(TinyClassifier):
    def configure_optimizers(self) -> Any:
        return torch.optim.Adafactor(self.parameters(), lr=0.01)


def test_an_adafactor_checkpoint_resumes(tmp_path: Path) -> None:
    """Adafactor keeps row/column factors for matrices and a variance for vectors: other fields per parameter rank,
    factors of another shape than the parameter. A good checkpoint of it must resume."""
    first = quiet_trainer(tmp_path / "a", max_steps=2)
    first.fit(Factored(), tiny_loaders(n=32)[0])
    path = tmp_path / "factored.ckpt"
    first.save_checkpoint(path)
    saved = torch.load(path, weights_only=True)["optimizer_states"][0]["state"]
    assert {"row_var", "col_var"} <= set(saved["net.0.weight"]) and "variance" in saved["net.0.bias"]
    second = quiet_trainer(tmp_path / "b", max_steps=3)
    second.fit(Factored(), tiny_loaders(n=32)[0], ckpt_path=path)
    assert second.global_step == 3


def test_small_writes_are_gathered_and_every_byte_is_hashed_once() -> None:
    import io
    import zlib

    from xtrain.core._internal.integrity import HashingStream

    class Counting(io.BytesIO):
        writes = 0

        def write(self, data: Any) -> int:
            Counting.writes += 1
            return super().write(data)

    rng = random.Random(0)
    chunks = [rng.randbytes(rng.choice([1, 7, 300, 5000, 70_000])) for _ in range(300)] + [b"\x00\x00"]
    sink = Counting()
    hashed = HashingStream(sink, coalesce=64 << 10)
    for chunk in chunks:
        assert hashed.write(chunk) == len(chunk)
    assert hashed.tell() == sum(map(len, chunks))
    hashed.finish()
    whole = b"".join(chunks)
    assert sink.getvalue() == whole
    assert (hashed.crc, hashed.size, hashed.tail) == (zlib.crc32(whole), len(whole), b"\x00\x00")
    large = [c for c in chunks if len(c) >= 64 << 10]  # handed on as they come, after what was gathered before
    small = sum(len(c) for c in chunks if len(c) < 64 << 10)
    assert Counting.writes <= 2 * len(large) + small // (64 << 10) + 1 < len(chunks) // 2


def test_a_file_cut_in_its_middle_is_called_truncated_not_unreadable(tmp_path: Path) -> None:
    """torch's reader fails such a file with OSError EINVAL, which the message took for a permissions problem."""
    from xtrain.core.defaults.torch_io import save_file

    path = tmp_path / "state.ckpt"
    save_file({f"w{i}": torch.randn(64, 64) for i in range(4)}, path)
    raw = path.read_bytes()
    for fraction in (0.5, 0.9, 0.99):
        path.write_bytes(raw[:int(len(raw) * fraction)])
        with pytest.raises(CheckpointError, match="is truncated or corrupted") as refused:
            read_checkpoint(path)
        assert "permissions" not in str(refused.value)


def test_full_and_sharded_files_get_the_mode_open_gives(tmp_path: Path) -> None:
    """0o666 less the umask, as torch.save's files (mkstemp's 0o600 hid a team's checkpoints from each other)."""
    import os
    import stat

    from checkpoint_helpers import to_sharded
    from xtrain.core.defaults.torch_io import save_file

    umask = os.umask(0o027)
    try:
        save_file({"w": torch.randn(2)}, tmp_path / "full.ckpt")
        to_sharded(tmp_path / "full.ckpt", tmp_path / "sharded")
    finally:
        os.umask(umask)
    files = [tmp_path / "full.ckpt", *(p for p in (tmp_path / "sharded").rglob("*") if p.is_file())]
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in files}
    assert len(modes) >= 4 and set(modes.values()) == {0o640}, modes


def test_damage_to_the_seal_fails_verification_instead_of_turning_it_off(tmp_path: Path) -> None:
    """Every byte of the end record's comment length and of the seal, flipped or cut off, is refused."""
    from xtrain.core._internal.integrity import verify_zip
    from xtrain.core.defaults.torch_io import save_file

    path = tmp_path / "state.ckpt"
    save_file({"w": torch.randn(8, 3)}, path)
    raw = path.read_bytes()
    damaged = tmp_path / "damaged.ckpt"
    for i in range(len(raw) - 23, len(raw)):
        for flip in (0x01, 0x80):
            damaged.write_bytes(raw[:i] + bytes([raw[i] ^ flip]) + raw[i + 1:])
            with pytest.raises(CheckpointError, match=r"damaged|torn|does not match"):
                verify_zip(damaged)
    for cut in range(1, 24):
        damaged.write_bytes(raw[:-cut])
        with pytest.raises(CheckpointError, match="torn"):
            verify_zip(damaged)
    plain = tmp_path / "plain.pt"
    for legacy in (False, True):  # torch's own files, zip and pre-zip, still pass
        torch.save({"w": torch.randn(8, 3)}, plain, _use_new_zipfile_serialization=not legacy)
        verify_zip(plain)


def test_a_saved_file_is_sealed_with_the_crc_of_its_bytes_and_leaves_no_temporary(tmp_path: Path) -> None:
    from xtrain.core._internal.integrity import crc32, verify_zip
    from xtrain.core.defaults.torch_io import save_file

    state = {f"w{i}": torch.randn(i + 1, 3) for i in range(40)} | {"big": torch.randn(600_000)}
    path = tmp_path / "sub" / "state.ckpt"
    crc, size = save_file(state, path)
    save_file(state, path)  # over the first: a second temporary name, the same bytes
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.ckpt"]
    raw = path.read_bytes()
    assert size == len(raw) - 21 and crc == crc32(b"\x00\x00", crc32(raw[:size - 2]))  # the archive, then its seal
    verify_zip(path)
    loaded = torch.load(path, weights_only=True)
    assert all(torch.equal(loaded[k], v) for k, v in state.items())


@pytest.fixture(scope="module")
def genuine_adam(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_full(tmp_path_factory.mktemp("genuine_adam"), module=Scheduled())[0]


ADAM_CASES: dict[str, tuple[Any, str]] = {
    "betas of strings": (lambda c: c["optimizer_states"][0]["param_groups"][0].update(betas=["a", "b"]),
                         "group 0: betas of another type"),
    "one beta": (lambda c: c["optimizer_states"][0]["param_groups"][0].update(betas=[0.9]),
                 "group 0: betas of another type"),
    "scheduler naming its optimizer": (lambda c: c["lr_schedulers"][0].update(optimizer={}),
                                       r"lr_schedulers\[0\]: optimizer would replace the scheduler's own attributes"),
    "scheduler naming a method": (lambda c: c["lr_schedulers"][0].update(step=1),
                                  r"lr_schedulers\[0\]: step would replace"),
    "scheduler epoch not finite": (lambda c: c["lr_schedulers"][0].update(last_epoch=float("nan")),
                                   r"lr_schedulers\[0\]: last_epoch not finite"),
    "scheduler rates for two groups": (lambda c: c["lr_schedulers"][0].update(base_lrs=[0.1, 0.1]),
                                       r"lr_schedulers\[0\].base_lrs: 2 values, one per parameter group of an "
                                       r"optimizer with 1"),
    "adam moments as scalars": (lambda c: [s.update(exp_avg=torch.tensor(0.0))
                                           for s in c["optimizer_states"][0]["state"].values()],
                                r"net.0.weight.exp_avg: checkpoint \(\) vs parameter \(32, 16\)"),
}


@pytest.mark.parametrize("case", sorted(ADAM_CASES))
def test_an_adam_and_scheduler_state_that_cannot_train_changes_nothing(case: str, genuine_adam: Path,
                                                                       tmp_path: Path) -> None:
    edit, expected = ADAM_CASES[case]
    path = _edited(genuine_adam, tmp_path, edit)
    snapshot = Snapshot()
    module = Scheduled()
    with pytest.raises(CheckpointError, match=expected) as info:
        quiet_trainer(tmp_path, callbacks=[snapshot]).fit(module, tiny_loaders(n=32)[0], ckpt_path=path)
    assert str(path) in str(info.value) and "nothing was loaded" in str(info.value)
    assert snapshot.trainer is not None and snapshot.before is not None
    assert _same(snapshot.state(snapshot.trainer), snapshot.before), "a failed restore changed the run's state"
    assert module.losses == [], "training started"


class Tagged(TinyClassifier):
    """A submodule with extra state (``get_extra_state``): user code that torch runs in the middle of a load."""

    def __init__(self) -> None:
        super().__init__()
        self.tail = _TagHolder()


class _TagHolder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tag = "v1"

    def get_extra_state(self) -> Any:
        return {"tag": self.tag}

    def set_extra_state(self, state: Any) -> None:
        if not isinstance(state, dict) or not str(state.get("tag", "")).startswith("v"):
            raise ValueError(f"bad extra state {state!r}")
        self.tag = state["tag"]


def test_a_module_refusing_its_extra_state_leaves_the_weights_and_the_run_alone(tmp_path: Path) -> None:
    genuine = train_full(tmp_path / "run", module=Tagged())[0]
    path = _edited(genuine, tmp_path, lambda c: c["state_dict"].update({"tail._extra_state": "junk"}))
    snapshot = Snapshot()
    module = Tagged()
    with pytest.raises(CheckpointError, match=r"tail._extra_state refused its saved state \(ValueError: bad extra"):
        quiet_trainer(tmp_path, callbacks=[snapshot]).fit(module, tiny_loaders(n=32)[0], ckpt_path=path)
    assert snapshot.trainer is not None and snapshot.before is not None
    assert _same(snapshot.state(snapshot.trainer), snapshot.before), "a failed restore changed the run's state"
    assert module.tail.tag == "v1"


def test_a_module_refusing_its_weights_puts_the_run_state_back(genuine: Path, tmp_path: Path) -> None:
    class Refusing(TinyClassifier):
        def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("not today")

    snapshot = Snapshot()
    with pytest.raises(CheckpointError, match=r"the module refused its weights \(RuntimeError: not today\)"):
        quiet_trainer(tmp_path, callbacks=[snapshot]).fit(Refusing(), tiny_loaders(n=32)[0], ckpt_path=genuine)
    assert snapshot.trainer is not None and snapshot.before is not None
    assert snapshot.trainer.global_step == 0 and snapshot.trainer._progress.state_dict()["total_batches"] == 0
    assert _same(snapshot.state(snapshot.trainer), snapshot.before), "the loop counters stayed restored"


def test_engine_load_checks_optimizer_state_saved_by_plain_torch(tmp_path: Path) -> None:
    """torch's own layout keys the state by position: its tensors are still checked against the parameters."""
    engine = Engine(accelerator="cpu", devices=1)
    engine.launch()
    first = TinyClassifier()
    optimizer = torch.optim.Adam(first.parameters())
    first(torch.randn(2, 16)).sum().backward()
    optimizer.step()
    state = optimizer.state_dict()
    for entry in state["state"].values():
        entry["exp_avg"] = torch.zeros([1] * entry["exp_avg"].dim())
    torch.save({"model": first.state_dict(), "optimizer": state}, tmp_path / "plain.ckpt")
    second = TinyClassifier()
    model, opt = engine.setup(second, torch.optim.Adam(second.parameters()))
    with pytest.raises(CheckpointError, match=r"optimizer_states\[0\]: 0.exp_avg: checkpoint \(1, 1\) vs parameter"):
        engine.load(tmp_path / "plain.ckpt", {"model": model, "optimizer": opt})
    assert not opt.state, "the optimizer was loaded"


def test_the_fix_for_a_checkpoint_that_does_not_fit_loads_the_weights_that_do(genuine: Path, tmp_path: Path) -> None:
    """The error's own code, run as written: with strict=False alone torch still refuses a tensor of another shape."""
    import re

    model = TinyClassifier(classes=5)  # the output layer has another shape; the hidden layer fits
    with pytest.raises(CheckpointError) as info:
        quiet_trainer(tmp_path, max_steps=3).fit(model, DataLoader(tiny_dataset(64, classes=5), batch_size=16),
                                                 ckpt_path=str(genuine))
    code = re.search(r"weights that fit[^`]*`([^`]+)`", str(info.value))
    assert code is not None, str(info.value)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    exec(code.group(1), {"model": model, "path": str(genuine), "read_checkpoint": read_checkpoint})
    saved = read_checkpoint(genuine)["state_dict"]
    after = model.state_dict()
    fitting = [k for k in after if saved[k].shape == after[k].shape]
    assert fitting and len(fitting) < len(after)
    for key in after:
        assert torch.equal(after[key], saved[key] if key in fitting else before[key]), key


class WithNewHead(TinyClassifier):
    """The trained module grown by a layer the checkpoint cannot have (a head added for the next task)."""

    def __init__(self) -> None:
        super().__init__()
        self.extra_head = torch.nn.Linear(4, 2)


def test_a_checkpoint_lacking_a_new_layer_names_strict_loading_not_hyperparameters(genuine: Path,
                                                                                   tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"lacks some of the module's weights: set self.strict_loading = False") \
            as info:
        quiet_trainer(tmp_path).validate(WithNewHead(), DataLoader(tiny_dataset(32), batch_size=16),
                                         ckpt_path=str(genuine), verbose=False)
    assert "hyperparameters" not in str(info.value)
    with pytest.raises(CheckpointError, match=r"hyperparameters") as other:  # another shape: other hyperparameters
        quiet_trainer(tmp_path).validate(TinyClassifier(classes=5), DataLoader(tiny_dataset(32, classes=5),
                                                                              batch_size=16),
                                         ckpt_path=str(genuine), verbose=False)
    assert "strict_loading" not in str(other.value)
    model = WithNewHead()
    model.strict_loading = False
    quiet_trainer(tmp_path).validate(model, DataLoader(tiny_dataset(32), batch_size=16), ckpt_path=str(genuine),
                                     verbose=False)
    saved = read_checkpoint(genuine)["state_dict"]
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())


def test_resuming_a_fit_with_a_new_layer_does_not_advise_a_non_strict_load_the_optimizer_refuses(genuine: Path,
                                                                                                tmp_path: Path) -> None:
    model = WithNewHead()
    model.strict_loading = True
    with pytest.raises(CheckpointError, match=r"optimizer_states") as info:
        quiet_trainer(tmp_path, max_steps=3).fit(model, DataLoader(tiny_dataset(32), batch_size=16),
                                                 ckpt_path=str(genuine))
    assert "strict_loading" not in str(info.value) and "hyperparameters" not in str(info.value)
    assert "weights that fit" in str(info.value)

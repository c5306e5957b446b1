"""The ``hparams.yaml`` a file logger leaves beside its metrics, and reading one back for ``load_from_checkpoint``.

Lightning's CSV and TensorBoard loggers write ``hparams.yaml`` into the run's directory, and scripts read it (to
rebuild a model, to tabulate runs) or pass it as ``load_from_checkpoint(..., hparams_file=...)``. The file holds
plain values only: nested dicts and lists of numbers, strings, booleans and ``None``; anything else is written as
its ``str`` (a path) or ``repr``, so the file can always be read back without running code. With PyYAML installed
it is block YAML; without it, JSON, which every YAML reader also reads.

Reading accepts ``.yaml``/``.yml`` (``yaml.safe_load``: tags that build Python objects are refused; a tuple, which
Lightning's ``hparams.yaml`` writes as ``!!python/tuple`` for ``betas=(0.9, 0.999)``, is read as one) and ``.json``.
What is read must stay small once expanded (:mod:`~xtrain.core._internal.bounded`): YAML aliases may share a value,
but not into a "billion laughs" that the loggers would copy out at fit start, and nesting too deep for the parsers
(``RecursionError``) is refused as a :class:`CheckpointError` like any other unreadable file.
"""

from __future__ import annotations

import enum
import functools
import json
import os
import threading
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

from xtrain.core._internal.bounded import MAX_DEPTH, check_bounded
from xtrain.core.errors import CheckpointError, ConfigError

__all__ = ["HPARAMS_SUFFIXES", "plain_hparams", "read_hparams_file", "write_hparams_yaml"]

HPARAMS_SUFFIXES = (".yaml", ".yml", ".json")
_LARGEST = 16 << 20


def plain_hparams(value: Any) -> Any:
    """``value`` as nested dicts/lists of plain values (a Namespace as a dict, a path as its string, an enum as its
    value; anything else as its ``repr``)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Namespace):
        value = vars(value)
    if isinstance(value, Mapping):
        return {str(key): plain_hparams(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_hparams(item) for item in value]
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, enum.Enum):
        return plain_hparams(value.value)
    return repr(value)


def write_hparams_yaml(path: Path, params: Mapping[str, Any]) -> None:
    """Write ``params`` to ``path`` (replaced whole: a reader never sees half a file).

    Raises:
        CheckpointError: ``params`` expand to more values, or nest deeper, than a hyperparameters file may hold
            (checked first: copying them into the file would expand them).
    """
    check_bounded(params, where=f"the hyperparameters to write to {str(path)!r}")
    plain = plain_hparams(params)
    yaml = _yaml()
    if yaml is None:
        text = json.dumps(plain, indent=2) + "\n"
    else:
        text = yaml.safe_dump(plain, sort_keys=False, default_flow_style=False, allow_unicode=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")  # runs in threads share a pid
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def read_hparams_file(path: str | Path) -> dict[str, Any]:
    """The hyperparameters in ``path`` (``hparams_file`` of ``load_from_checkpoint``), read without running code.

    Raises:
        ConfigError: ``path`` does not end in ``.yaml``, ``.yml`` or ``.json``.
        CheckpointError: It cannot be read, is not YAML/JSON, does not hold a mapping with string keys, or expands
            to too many values or too deep a nesting (:func:`~xtrain.core._internal.bounded.check_bounded`).
    """
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix not in HPARAMS_SUFFIXES:
        raise ConfigError("hparams_file", str(path), "is not a hyperparameters file xtrain reads.",
                          choices=HPARAMS_SUFFIXES, fix="pass the run's hparams.yaml (its logger writes it).")
    try:
        if file.exists() and not file.is_file():  # a FIFO blocks forever, /dev/zero never ends; both have 0 bytes
            raise CheckpointError(f"hparams_file {str(file)!r} is not a regular file (a directory, a device or a "
                                  f"pipe). Pass the hparams.yaml of the run (in its logger's directory).")
        size = file.stat().st_size
        if size > _LARGEST:
            raise CheckpointError(f"hparams_file {str(file)!r} is {size} bytes; a hyperparameters file is a few "
                                  f"kilobytes (at most {_LARGEST}). Check the path: it should be the run's "
                                  f"hparams.yaml.")
        with file.open("rb") as f:
            raw = f.read(_LARGEST + 1)  # at most what its size said: it may have grown since
        if len(raw) > _LARGEST:
            raise CheckpointError(f"hparams_file {str(file)!r} holds more than {_LARGEST} bytes; a hyperparameters "
                                  f"file is a few kilobytes. Check the path: it should be the run's hparams.yaml.")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CheckpointError(f"hparams_file {str(file)!r} cannot be read ({type(err).__name__}: {err}). Pass the "
                              f"hparams.yaml of the run (in its logger's directory), or drop hparams_file to use "
                              f"the hyperparameters the checkpoint holds.") from None
    try:
        loaded = _parse(file, text, suffix)
    except RecursionError:
        raise CheckpointError(f"hparams_file {str(file)!r} is nested too deeply for the "
                              f"{'JSON' if suffix == '.json' else 'YAML'} parser to follow (RecursionError); "
                              f"hyperparameters may nest at most {MAX_DEPTH} levels deep. Fix: flatten the nested "
                              f"lists/mappings, or pass the hparams.yaml the run's logger wrote.") from None
    check_bounded(loaded, where=f"hparams_file {str(file)!r}")
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict) or not all(isinstance(key, str) for key in loaded):
        raise CheckpointError(f"hparams_file {str(file)!r} holds a {type(loaded).__name__}, not a mapping of names to "
                              f"values. It must look like 'lr: 0.01' per line (YAML) or {{\"lr\": 0.01}} (JSON).")
    return loaded


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:
        return None
    return yaml


@functools.cache
def _safe_loader(yaml: Any) -> Any:
    """``yaml.SafeLoader`` that also reads ``!!python/tuple`` (a sequence: building it runs no code)."""
    loader: Any = type("HparamsLoader", (yaml.SafeLoader,), {})
    loader.add_constructor("tag:yaml.org,2002:python/tuple",
                           lambda load, node: tuple(load.construct_sequence(node, deep=True)))
    return loader


def _parse(file: Path, text: str, suffix: str) -> Any:
    if suffix != ".json":
        yaml = _yaml()
        if yaml is not None:
            from xtrain.core._internal.yaml_keys import repeated_key_in

            loader = _safe_loader(yaml)(text)  # yaml.safe_load's steps, with the node tree checked in between
            try:
                root = loader.get_single_node()
                repeated = repeated_key_in(root)
                if repeated is not None:
                    raise CheckpointError(f"hparams_file {str(file)!r}: {repeated}. Fix: delete the one you do not "
                                          f"mean.")
                return None if root is None else loader.construct_document(root)
            except yaml.YAMLError as err:
                raise CheckpointError(f"hparams_file {str(file)!r} is not valid YAML, or uses a tag that would build a "
                                      f"Python object (refused): {str(err)[:300]}") from None
            finally:
                loader.dispose()
    try:
        return json.loads(text)
    except ValueError as err:
        fix = "" if suffix == ".json" else " Install PyYAML to read YAML that is not JSON: pip install pyyaml."
        raise CheckpointError(f"hparams_file {str(file)!r} could not be parsed ({err}).{fix}") from None

"""The manifest every checkpoint carries (its ``"xtrain"`` entry): what wrote it, and its checks on reading.

The manifest says how the checkpoint was written (format version, strategy, world size, layout, precision), which
distributions wrote it (the installed xtrain packages, and the distribution of each plugin, so a checkpoint written
by a third-party strategy names it), and how its bytes are protected (``checksums``). It is read from disk, so every
field is checked for type before anything uses it.
"""

from __future__ import annotations

import difflib
import functools
import importlib.metadata
from typing import TYPE_CHECKING, Any

from xtrain.core._internal.integrity import ALGORITHM
from xtrain.core._internal.versions import xtrain_versions
from xtrain.core.errors import CheckpointError

if TYPE_CHECKING:
    from xtrain.core.strategy import Strategy

__all__ = ["FORMAT_VERSION", "LAYOUTS", "check_manifest", "data_parallel_size", "distribution_of", "per_rank_batch_size",
           "plugin_distributions", "write_manifest"]

FORMAT_VERSION = 1
LAYOUTS = ("full", "sharded")
# field: (type, required)
_FIELDS: dict[str, tuple[type | tuple[type, ...], bool]] = {
    "format_version": (int, True), "strategy": (str, True), "world_size": (int, True), "layout": (str, True),
    "precision": (str, False), "versions": (dict, False), "distributions": (dict, False),
    "checksums": ((str, dict), False), "written_by": (str, False), "consolidated_from": (str, False),
    "data_parallel_size": (int, False),
}


@functools.cache
def _packages() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


@functools.cache
def distribution_of(module: str) -> dict[str, str] | None:
    """``{"name", "version"}`` of the installed distribution that provides ``module`` (cached per module)."""
    parts = module.split(".")
    named_after = f"{parts[0]}-{parts[1]}" if len(parts) > 1 else ""
    if named_after and _installed(named_after):
        # xtrain.strategies -> xtrain-strategies: asked by name, without packages_distributions(), which parses every
        # installed distribution (about 1 s with 270 installed, at the first checkpoint of every process).
        return {"name": named_after, "version": importlib.metadata.version(named_after)}
    # Editable installs are missing from packages_distributions(): fall back on the naming convention.
    candidates = _packages().get(parts[0], []) or [name for name in (parts[0],) if _installed(name)]
    if len(candidates) > 1 and len(parts) > 1:
        # A namespace package (xtrain) is shared: pick the distribution named after the sub-package, or the one whose
        # file list holds the module.
        named = [d for d in candidates if d.lower().replace("_", "-") == f"{parts[0]}-{parts[1]}".lower()]
        if named:
            candidates = named
        else:
            suffix = "/".join(parts)
            candidates = [d for d in candidates
                          if any(str(f).startswith(suffix) for f in importlib.metadata.files(d) or [])] or candidates
    if not candidates:
        return None
    name = candidates[0]
    return {"name": name, "version": importlib.metadata.version(name)}


def _installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def plugin_distributions(strategy: Strategy) -> dict[str, dict[str, str] | None]:
    """The distribution of each plugin that wrote a checkpoint."""
    plugins = {"accelerator": strategy.accelerator, "strategy": strategy, "precision": strategy.precision,
               "checkpoint_io": strategy.checkpoint_io}
    return {role: distribution_of(type(plugin).__module__) for role, plugin in plugins.items()}


def data_parallel_size(strategy: Strategy) -> int:
    """How many different batches one step of ``strategy`` sees: its sampler's replicas (tensor-parallel ranks
    share theirs), or 1 when every process sees all the data."""
    kwargs = strategy.distributed_sampler_kwargs
    return int(kwargs["num_replicas"]) if kwargs else 1


def per_rank_batch_size(loader: Any) -> int | None:
    """The samples in each of ``loader``'s batches on one rank (its batch sampler's ``batch_size``), or ``None``
    where it has none (an iterable dataset, several loaders combined, a custom batch sampler)."""
    size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def write_manifest(strategy: Strategy, **extra: Any) -> dict[str, Any]:
    """The manifest of a checkpoint ``strategy`` is about to write."""
    return {
        "format_version": FORMAT_VERSION, "strategy": strategy.name, "world_size": strategy.world_size,
        "data_parallel_size": data_parallel_size(strategy), "layout": strategy.checkpoint_layout,
        "precision": strategy.precision.name, "versions": xtrain_versions(),
        "distributions": plugin_distributions(strategy), "checksums": ALGORITHM if strategy.checkpoint_io.checksums
        else "none", **extra,
    }


def check_manifest(meta: Any, path: str) -> dict[str, Any]:
    """Return ``meta`` if every field has its type and a readable value; else :class:`CheckpointError` naming it."""
    if not isinstance(meta, dict):
        raise CheckpointError(f"checkpoint {path!r}: its 'xtrain' manifest is a {type(meta).__name__}, not a dict; "
                              f"the file is corrupted or was not written by xtrain.")
    unknown = sorted(str(key) for key in meta if key not in _FIELDS)
    if unknown:  # a damaged key ("checksumr") would otherwise drop its field silently: checksums off
        close = difflib.get_close_matches(unknown[0], _FIELDS, n=1)
        raise CheckpointError(f"checkpoint {path!r}: its manifest has the entry {unknown[0]!r}"
                              + (f" (a damaged {close[0]!r}?)" if close else "") + f", which format version "
                              f"{FORMAT_VERSION} does not have (it has {', '.join(_FIELDS)}): the file is corrupted, or "
                              f"was written by a newer xtrain-core (pip install -U xtrain-core).")
    for field, (kind, required) in _FIELDS.items():
        if field not in meta:
            if required:
                raise CheckpointError(f"checkpoint {path!r}: its manifest has no {field!r} entry; the file is "
                                      f"corrupted or was not written by xtrain.")
            continue
        value = meta[field]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise CheckpointError(f"checkpoint {path!r}: its manifest's {field!r} is {value!r} "
                                  f"({type(value).__name__}), not a {_name(kind)}; the file is corrupted.")
    sums = meta.get("checksums")
    if isinstance(sums, str) and sums not in (ALGORITHM, "none"):
        raise CheckpointError(f"checkpoint {path!r}: its manifest's 'checksums' is {sums!r}, neither {ALGORITHM!r} "
                              f"nor 'none'; the file is corrupted.")
    if meta["format_version"] > FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path!r} has format version {meta['format_version']}; this xtrain-core "
                              f"reads up to {FORMAT_VERSION}. Upgrade: pip install -U xtrain-core")
    if meta["format_version"] < 1 or meta["world_size"] < 1 or meta["layout"] not in LAYOUTS:
        raise CheckpointError(f"checkpoint {path!r}: its manifest says format_version={meta['format_version']!r}, "
                              f"world_size={meta['world_size']!r}, layout={meta['layout']!r} (valid layouts: "
                              f"{', '.join(LAYOUTS)}); the file is corrupted.")
    return meta


def _name(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__

"""Errors that help someone who only renamed ``lightning`` to ``xtrain`` in their imports.

``from xtrain.core import LightningModule`` would otherwise fail with a bare "cannot import name"; the message
names xtrain's equivalent from the rule table and points at ``xtrain migrate``. Only ``rules.py`` is read (no
LibCST), and only when a lookup has already failed, so ``import xtrain.core`` pays nothing for it.
"""

from __future__ import annotations

import functools
import opcode
from types import FrameType, ModuleType

from xtrain.core._internal.migrate.rules import RULES, Rule, Section

__all__ = ["attribute_hint", "hint", "missing_name_error"]

_IMPORT_FROM = opcode.opmap["IMPORT_FROM"]
_WHOLE_SCRIPT = "To convert a whole Lightning script, run: xtrain migrate <file>"


def _rule(name: str) -> Rule | None:
    found = [r for r in RULES if r.section is Section.NAME and r.lightning.rpartition(".")[2] == name]
    found.sort(key=lambda r: (r.xtrain is None, not r.lightning.startswith("lightning.pytorch")))
    return found[0] if found else None


@functools.cache
def _trainer_attributes() -> dict[str, str]:
    return {r.lightning: f"it is trainer.{r.xtrain} in xtrain" if r.xtrain else r.note
            for r in RULES if r.section is Section.TRAINER_API and "." not in r.lightning}


def attribute_hint(name: str) -> str | None:
    """What to write instead of Lightning's ``trainer.<name>`` (``None`` if it is not one of Lightning's)."""
    instead = _trainer_attributes().get(name)
    return None if instead is None else f"Lightning's trainer.{name}: {instead}. {_WHOLE_SCRIPT}"


def hint(name: str) -> str | None:
    """What to write instead of Lightning's ``name`` (``None`` if it is not one of Lightning's names)."""
    r = _rule(name)
    if r is None:
        return None
    if r.xtrain is None:
        instead = f"Lightning's {name} has no xtrain equivalent: {r.note}"
    elif r.xtrain.startswith("xtrain."):
        where, _, new = r.xtrain.rpartition(".")
        instead = f"xtrain's name for Lightning's {name} is {new}: from {where} import {new}"
    else:
        instead = f"Lightning's {name} becomes {r.xtrain}"
    return f"{instead}. {_WHOLE_SCRIPT}"


def _in_from_import(frame: FrameType | None) -> bool:
    """Whether ``frame`` is running ``from ... import name``: CPython replaces an AttributeError raised there with
    its own ImportError, dropping our message, so that case must raise an ImportError itself."""
    if frame is None or frame.f_lasti < 0:
        return False
    code = frame.f_code.co_code
    return frame.f_lasti < len(code) and code[frame.f_lasti] == _IMPORT_FROM


def missing_name_error(module: ModuleType, name: str, caller: FrameType | None) -> Exception:
    """The error for ``module.name`` not existing: with a hint for Lightning names, an ImportError when ``caller``
    runs ``from module import name`` (see :func:`_in_from_import`), else an AttributeError (so hasattr stays
    False)."""
    text = hint(name)
    message = f"module {module.__name__!r} has no attribute {name!r}"
    if text is None:
        return AttributeError(message, name=name, obj=module)
    if _in_from_import(caller):
        return ImportError(f"cannot import name {name!r} from {module.__name__!r}; {text}", name=module.__name__,
                           path=getattr(module, "__file__", None))
    return AttributeError(f"{message}; {text}", name=name, obj=module)

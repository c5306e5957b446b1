"""The file names a ModelCheckpoint writes, told apart from any other ``*.ckpt``.

A ranking read back from a checkpoint file on resume decides what pruning deletes; matching its entries against the
names the callback itself produces keeps a hostile or stale ranking from deleting a user's file in the same folder
(``my_pretrained_backbone.ckpt``), while the files of earlier runs (xtrain's or Lightning's) still match.
"""

from __future__ import annotations

import functools
import re

__all__ = ["DEFAULT_FILENAME", "FIELD", "name_pattern"]

FIELD = re.compile(r"\{([A-Za-z_][\w/.-]*)(:[^}]*)?\}")
DEFAULT_FILENAME = "{epoch}-{step}"
_NUMBER = "-?(?:inf|nan|[0-9]+(?:\\.[0-9]+)?(?:e[-+][0-9]+)?)"  # str() of a float or an int
_ANY = "[^/]+"


@functools.lru_cache(maxsize=64)  # asked for every file a save prunes, always for the same template
def name_pattern(template: str, *, auto_insert_metric_name: bool, extension: str,
                 last_name: str) -> re.Pattern[str]:
    """A pattern whose ``fullmatch`` accepts every name ``ModelCheckpoint._format`` gives ``template`` and the
    ``last`` names, each with the ``-vN`` suffix of the version counter and ``extension``.

    Without a format spec a field's text is what ``str`` gives its value, a number's spelling (``epoch`` and
    ``step`` are ints, a metric a float, or 0 before it is logged; a metric logged under either name replaces it),
    so ``filename="{epoch}"`` without metric names still tells ``3.ckpt`` from ``backbone.ckpt``. With a spec of the
    user's, any non-empty text without ``/``. The literal parts of the template must be there as written (``/``
    became ``_``).
    """
    parts: list[str] = []
    position = 0
    for match in FIELD.finditer(template):
        parts.append(re.escape(template[position:match.start()].replace("/", "_")))
        name = match.group(1)
        label = re.escape(name.replace("/", "_") + "=") if auto_insert_metric_name else ""
        parts.append(label + (_ANY if match.group(2) else _NUMBER))
        position = match.end()
    parts.append(re.escape(template[position:].replace("/", "_")))
    return re.compile(f"(?:{''.join(parts)}|{re.escape(last_name)})(?:-v[0-9]+)?{re.escape(extension)}")

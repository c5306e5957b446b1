"""YAML for the command line and its config files, refusing a key written twice in one mapping and a config that
expands to too many values (YAML aliases of aliases: a few hundred bytes that jsonargparse would copy out into
gigabytes).

jsonargparse (as LightningCLI) keeps the second of two equal keys; xtrain's parsers refuse the file naming both
lines (:mod:`~xtrain.core._internal.yaml_keys`), and otherwise read values exactly as jsonargparse's own YAML mode.
Imported only by the CLI (PyYAML and jsonargparse come with the ``cli`` extra).
"""

from __future__ import annotations

from typing import Any

import yaml
from jsonargparse import get_loader, set_loader

from xtrain.core._internal.bounded import bounds_problem
from xtrain.core._internal.yaml_keys import repeated_key

__all__ = ["PARSER_MODE"]

PARSER_MODE = "xtrain_yaml"  # for parser_mode=: registered with jsonargparse when this module is imported


def _load(stream: str) -> Any:
    problem = repeated_key(stream, yaml.SafeLoader)  # keys compared as written: no resolver matters
    if problem is not None:  # a YAMLError: jsonargparse reports it as a problem in the config
        raise yaml.YAMLError(f"{problem}. Fix: delete the one you do not mean.")
    loaded = get_loader("yaml")(stream)
    problem = bounds_problem(loaded)  # before jsonargparse copies and checks it: an alias bomb expands there
    if problem is not None:
        raise yaml.YAMLError(f"The config {problem}. Fix: write each value out once (a few YAML anchors are fine; "
                             f"one list aliased many times is not) and keep large data in a file whose path the "
                             f"config gives.")
    return loaded


set_loader(PARSER_MODE, _load, exceptions=(yaml.YAMLError,))

"""What the cluster environments share: reading integer variables, deriving a port, checking the user's numbers."""

from __future__ import annotations

import os
import zlib

from xtrain.core.errors import ConfigError

__all__ = ["check_layout", "env_int", "port_from"]


def env_int(*names: str, default: int | None = None) -> int:
    """The first of ``names`` that is set, as an int."""
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            return int(value)
    if default is None:
        raise ConfigError("plugins", names[0], "is not set, but the detected cluster environment needs it.",
                          fix=f"run under the launcher that sets {' or '.join(names)}, or pass another environment.")
    return default


def port_from(key: str, *, base: int = 20000, span: int = 20000) -> int:
    """A port every process of one job derives alike from the job's id (stable across processes and hosts)."""
    return base + zlib.crc32(key.encode()) % span


def check_layout(*, who: str, per_node: int, nodes: int, num_devices: int, num_nodes: int, per_node_flag: str,
                 nodes_flag: str) -> None:
    """Raise when ``devices``/``num_nodes`` disagree with the processes the cluster started.

    Args:
        who: The launcher's name for messages ("torchrun", "SLURM").
        per_node: Processes the cluster started on each node.
        nodes: Nodes the cluster started.
        num_devices: Processes per node the Trainer expects (``devices=`` for one process per device).
        num_nodes: The Trainer's ``num_nodes``.
        per_node_flag: The cluster's option for processes per node, for the fix ("--nproc-per-node").
        nodes_flag: The cluster's option for nodes ("--nnodes").
    """
    if num_devices != per_node:
        raise ConfigError("devices", num_devices, f"asks for {num_devices} process(es) per node, but {who} started "
                          f"{per_node} per node ({per_node_flag}={per_node}).",
                          fix=f"write devices={per_node}, or start the job with {per_node_flag}={num_devices}.")
    if num_nodes != nodes:
        raise ConfigError("num_nodes", num_nodes, f"does not match the {nodes} node(s) {who} started "
                          f"({nodes_flag}={nodes}).",
                          fix=f"write num_nodes={nodes}, or start the job with {nodes_flag}={num_nodes}.")

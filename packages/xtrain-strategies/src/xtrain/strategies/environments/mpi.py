"""Processes started by ``mpirun``/``mpiexec`` (Open MPI, and MPICH-style Hydra launchers).

The ranks come from the launcher's variables (``OMPI_COMM_WORLD_*``, or ``PMI_*``), so no MPI library is needed to
read them. The rendezvous address of the ``torch.distributed`` process group is found, in this order:

1. with ``mpi4py`` (if importable): rank 0 picks its host name and a free port and broadcasts them; the node of
   each rank is found by gathering host names;
2. from ``MASTER_ADDR``/``MASTER_PORT`` when the user exported them (``mpirun -x MASTER_ADDR ...``);
3. on a single node: ``127.0.0.1`` and a port derived from the job's id, which every rank computes alike.

A multi-node job with neither mpi4py nor ``MASTER_ADDR`` is refused before training with that fix.
"""

from __future__ import annotations

import os
import socket
from typing import Any, ClassVar

from typing_extensions import override

from xtrain.core.defaults.local import find_free_port
from xtrain.core.environment import ClusterEnvironment
from xtrain.core.errors import ConfigError
from xtrain.strategies.environments._common import check_layout, env_int, port_from

__all__ = ["MPIEnvironment"]

_SIZE = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_RANK = ("OMPI_COMM_WORLD_RANK", "PMI_RANK")
_LOCAL_RANK = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
_LOCAL_SIZE = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
_JOB_ID = ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_JOBID", "PMI_ID")


def _mpi4py_comm() -> Any:
    """``MPI.COMM_WORLD`` if mpi4py imports and finds an MPI library, else ``None``."""
    try:
        from mpi4py import MPI
    except Exception:  # noqa: BLE001 - ImportError, or a RuntimeError/OSError when no libmpi is installed
        return None
    return MPI.COMM_WORLD


class MPIEnvironment(ClusterEnvironment):
    """Ranks from ``mpirun``'s variables; rendezvous through mpi4py, ``MASTER_ADDR`` or a job-derived port.

    Args:
        use_mpi4py: ``None`` uses mpi4py when it imports; ``False`` never imports it (reads only variables).
    """

    name: ClassVar[str] = "mpi"
    detect_priority: ClassVar[int | None] = 10

    def __init__(self, *, use_mpi4py: bool | None = None) -> None:
        self.use_mpi4py = use_mpi4py
        self._rendezvous: tuple[str, int, int] | None = None

    @classmethod
    @override
    def detect(cls) -> bool:
        return any(name in os.environ for name in _SIZE)

    @property
    @override
    def creates_processes_externally(self) -> bool:
        return True

    @override
    def processes_per_node(self) -> int | None:
        return self._local_size()

    def _local_size(self) -> int:
        return env_int(*_LOCAL_SIZE, default=self.world_size())

    def _resolve(self) -> tuple[str, int, int]:
        """``(address, port, node_rank)``; with mpi4py a collective, so every rank reaches it at the same point."""
        if self._rendezvous is not None:
            return self._rendezvous
        comm = _mpi4py_comm() if self.use_mpi4py is not False else None
        if comm is not None:
            host = socket.gethostname()
            hosts = comm.allgather(host)
            node_rank = list(dict.fromkeys(hosts)).index(host)
            if comm.Get_rank() == 0:
                chosen = (os.environ.get("MASTER_ADDR") or _address_of(host),
                          int(os.environ.get("MASTER_PORT") or find_free_port()))
            else:
                chosen = None
            address, port = comm.bcast(chosen, root=0)
        else:
            node_rank = self.global_rank() // max(self._local_size(), 1)
            if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
                address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
            elif self._local_size() == self.world_size():
                job = next((os.environ[n] for n in _JOB_ID if os.environ.get(n)), "mpi")
                address, port = "127.0.0.1", port_from(f"mpi-{job}")
            else:
                raise ConfigError("plugins", "mpi", f"this mpirun job spans {self.world_size() // self._local_size()} "
                                  f"nodes, and without mpi4py there is no way to agree on a rendezvous address.",
                                  fix="pip install 'xtrain-strategies[mpi]' (mpi4py), or export MASTER_ADDR and "
                                      "MASTER_PORT to every rank (mpirun -x MASTER_ADDR -x MASTER_PORT ...).")
        self._rendezvous = (address, port, node_rank)
        return self._rendezvous

    @property
    @override
    def main_address(self) -> str:
        return self._resolve()[0]

    @property
    @override
    def main_port(self) -> int:
        return self._resolve()[1]

    @override
    def world_size(self) -> int:
        return env_int(*_SIZE)

    @override
    def global_rank(self) -> int:
        return env_int(*_RANK)

    @override
    def local_rank(self) -> int:
        return env_int(*_LOCAL_RANK, default=0)

    @override
    def node_rank(self) -> int:
        return self._resolve()[2]

    @override
    def validate_settings(self, *, num_devices: int, num_nodes: int) -> None:
        per_node = self._local_size()
        check_layout(who="mpirun", per_node=per_node, nodes=max(self.world_size() // max(per_node, 1), 1),
                     num_devices=num_devices, num_nodes=num_nodes, per_node_flag="-npernode", nodes_flag="--host")
        self._resolve()


def _address_of(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host

"""Horovod without ``horovodrun``: xtrain starts the ranks itself, with Horovod's own Gloo rendezvous.

``horovodrun --gloo`` does two things: it runs an HTTP rendezvous server (``horovod.runner.http.http_server.
RendezvousServer``, which Gloo's contexts use to find each other) and it starts every process with its place in
``HOROVOD_*`` variables. This launcher does the same from inside the user's script, so ``python train.py`` with
``Trainer(strategy="horovod", devices=2)`` trains on two ranks (Lightning required ``horovodrun`` and declined to
launch Horovod itself, #9050).

It is the re-exec launcher with Horovod's variables: the caller becomes rank 0 and hosts the rendezvous server,
the other ranks re-run the caller's command, and the same watcher, ``PR_SET_PDEATHSIG`` tie and fail-fast rules
apply (a rank that raises or is killed ends the run within seconds, naming that rank).
"""

from __future__ import annotations

import atexit
import os
from typing import Any, ClassVar

from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.strategies._internal.horovod_runtime import horovod_or_error
from xtrain.strategies.launchers.subprocess_script import SubprocessScriptLauncher

__all__ = ["HorovodLauncher"]


class HorovodLauncher(SubprocessScriptLauncher):
    """Starts ``num_processes`` Horovod ranks on this machine through Horovod's Gloo rendezvous server.

    Takes the keyword arguments of :class:`SubprocessScriptLauncher` (``num_processes``, one rank per device;
    ``num_nodes``, which must be 1: across machines start the job with ``horovodrun -H host1:n,host2:n``; and
    ``environment``).
    """

    interactive_compatible: ClassVar[bool] = False
    runs_in_caller: ClassVar[bool] = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._slots: list[Any] = []

    @override
    def check(self) -> None:
        if self.num_nodes > 1:
            raise ConfigError("num_nodes", self.num_nodes, "xtrain starts Horovod ranks on one machine only.",
                              fix="start a multi-node Horovod job with horovodrun -np N -H host1:n,host2:n python "
                                  "script.py (or mpirun); xtrain then detects the ranks it started.")
        super().check()

    @override
    def _start_children(self) -> None:
        horovod_or_error()
        from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
        from horovod.runner.http.http_server import RendezvousServer

        self._slots = get_host_assignments(parse_hosts(f"localhost:{self.num_processes}"), self.num_processes)
        server = RendezvousServer()
        port = server.start()
        server.init(self._slots)
        atexit.register(server.stop)
        os.environ.update({"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
                           "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
                           "HOROVOD_GLOO_IFACE": "lo", **self._slot_variables(0)})
        super()._start_children()

    @override
    def _child_environment(self, local_rank: int) -> dict[str, str]:
        return {**super()._child_environment(local_rank), **self._slot_variables(local_rank)}

    def _slot_variables(self, local_rank: int) -> dict[str, str]:
        slot = self._slots[local_rank]
        return {"HOROVOD_HOSTNAME": slot.hostname, "HOROVOD_RANK": str(slot.rank), "HOROVOD_SIZE": str(slot.size),
                "HOROVOD_LOCAL_RANK": str(slot.local_rank), "HOROVOD_LOCAL_SIZE": str(slot.local_size),
                "HOROVOD_CROSS_RANK": str(slot.cross_rank), "HOROVOD_CROSS_SIZE": str(slot.cross_size)}

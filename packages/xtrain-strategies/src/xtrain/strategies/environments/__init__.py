"""Cluster environments: ranks and the rendezvous address from torchrun, SLURM, LSF, MPI or Kubeflow.

Detection order (``detect_priority``, highest first): torchelastic (40), horovodrun (35), SLURM (30), LSF (20),
MPI (10), then core's ``local`` (0). Kubeflow is never detected; pass ``plugins=["kubeflow"]``.
"""

from xtrain.strategies.environments.horovod import HorovodEnvironment
from xtrain.strategies.environments.kubeflow import KubeflowEnvironment
from xtrain.strategies.environments.lsf import LSFEnvironment
from xtrain.strategies.environments.mpi import MPIEnvironment
from xtrain.strategies.environments.slurm import SLURMEnvironment
from xtrain.strategies.environments.torchelastic import TorchElasticEnvironment

__all__ = ["HorovodEnvironment", "KubeflowEnvironment", "LSFEnvironment", "MPIEnvironment", "SLURMEnvironment",
           "TorchElasticEnvironment"]

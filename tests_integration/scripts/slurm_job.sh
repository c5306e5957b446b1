#!/bin/bash
# The SLURM batch script of the test cluster's jobs (docs/guides/slurm.md explains each line).
#   sbatch --output=OUT [--signal=USR1@SECONDS] slurm_job.sh PYTHON slurm_train.py RUN_ROOT [options]
#SBATCH --job-name=xtrain-test
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --requeue
#SBATCH --open-mode=append
echo "batch: job ${SLURM_JOB_ID} restart ${SLURM_RESTART_COUNT:-0} on ${SLURM_JOB_NODELIST}"
exec srun --kill-on-bad-exit=1 "$@"

"""The processes around a training: N local workers from one command, restarts after a failure, Slurm's
requeue.

Apart from `launch` because a supervisor never imports TensorFlow: it starts `python -m launcher` children
(through `forkserver`), watches them and decides from their outcome; the training launch only asks it who it is
(`restarts.attempt_number`) and hands Slurm its signal (`slurm`).

Modules:
    local_workers: `strategy.local_workers=N`: a multi-worker job on this machine, from one command
    restarts: `train.max_restarts=N`: a failed training restarts from its newest checkpoint
    slurm: Slurm's time-limit warning turned into a requeue (`strategy.slurm_requeue=true`)

May import: `config`, `launcher.forkserver` and the leaf modules (`outcome`, `background`). Never TensorFlow,
`launch`, `train` or `tracking`.
"""

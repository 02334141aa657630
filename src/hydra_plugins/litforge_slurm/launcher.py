"""`hydra/launcher=slurm`: Hydra's submitit SLURM launcher, with a sweep job that requeues itself kept in its sweep.

litforge's pre-emption path (litforge.callbacks.fault_tolerance.CheckpointOnSignal) saves `last.ckpt` at a step all
ranks agree on and runs `scontrol requeue` itself. Under submitit that attempt must give its sweep *no* result:
submitit's job runner (`submitit.core.submission.process_job`) writes whatever the call returns (Hydra's `run_job`
returns a FAILED JobReturn carrying the `TrainingStopped`) to `<job>_<task>_result.pkl`, and the launcher on the
submitting side takes the first result file it finds as the job's end. The sweep then recorded the job FAILED and
ended in a traceback while the requeued attempt ran on outside it. So the attempt that requeued its job leaves with
SystemExit instead (which submitit's runner does not catch: no result file); the requeued attempt runs the same
pickled call again (same overrides, same job number, so the same folder), resumes from that folder's `last.ckpt`
(litforge.checkpointing.resume.decide), and its result is the job's. Only the process that ran `scontrol requeue`
(global rank 0) leaves without a result; the others' files are not read (the launcher takes task 0's).

Why not submitit's own requeue (`checkpoint()` on USR2, `max_num_timeout`): it runs the checkpoint inside the signal
handler of task 0 alone and requeues at once; litforge's save is a collective at an agreed step, which cannot run in
a signal handler (Lightning's SLURM handler hung there under DDP). The signal submitit asks for is therefore USR1,
litforge's (conf/hydra/launcher/slurm.yaml); submitit's USR2 handler stays installed and unused.
"""

from __future__ import annotations

from typing import Any

from litforge.runtime.requeue import forget_requeue, requeued_job

try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as HydraSlurmLauncher
except ModuleNotFoundError:  # the `cluster` extra is absent: Hydra's plugin scan, on every start, must still import
    # this module; `hydra/launcher=slurm` itself is refused in one line naming the extra (litforge.runtime.extras)
    from hydra.plugins.launcher import Launcher as HydraSlurmLauncher

EXIT_CODE = 143  # as after SIGTERM (litforge.callbacks.training.fit_or_stop): the job was stopped, and comes back


class SlurmLauncher(HydraSlurmLauncher):
    """Hydra's submitit SLURM launcher; a job attempt that requeued itself ends without a result (module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        forget_requeue()
        result = super().__call__(*args, **kwargs)
        job = requeued_job()
        if job is not None:
            raise SystemExit(EXIT_CODE)
        return result

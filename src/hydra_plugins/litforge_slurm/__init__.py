"""litforge's SLURM sweep launcher (`hydra/launcher=slurm`): Hydra's submitit launcher, with a sweep job that requeues
itself kept in its sweep (launcher.py). Here because Hydra instantiates launchers only from the `hydra_plugins`
package. :func:`check_launcher` (here: free of submitit, which this package's extra may lack) is asked before Hydra
starts a sweep."""

from __future__ import annotations

import shutil
from typing import Any


def check_launcher(hydra: Any) -> None:
    """A sweep's launcher that cannot start, refused in one line before Hydra makes the sweep folder: a SLURM one
    (ours, or Hydra's `submitit_slurm`) without `sbatch` and `srun` on PATH. submitit would end in `RuntimeError:
    Could not detect "srun"` with the sweep folder made. `hydra`: the composed config's `hydra` node."""
    from litforge.core.errors import ConfigError

    launcher = (hydra.get("launcher") or {}).get("_target_") or ""
    missing = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
    if str(launcher).endswith("SlurmLauncher") and missing:
        choice = (hydra.get("runtime") or {}).get("choices", {}).get("hydra/launcher") or "slurm"
        raise ConfigError(
            f"hydra/launcher={choice}: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on PATH, so "
            "no job could be submitted (this is not a SLURM login node); run the sweep where SLURM is, or drop "
            f"hydra/launcher={choice} to run its jobs here"
        )

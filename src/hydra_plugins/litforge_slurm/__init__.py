"""litforge's SLURM sweep launcher (`hydra/launcher=slurm`): Hydra's submitit launcher, with a sweep job that requeues
itself kept in its sweep (launcher.py). Here because Hydra instantiates launchers only from the `hydra_plugins`
package."""

"""The jobs (train, eval, predict, export, generate, prepare): plain functions of the composed config.

Only the command line (litforge.cli) imports a job, and no job imports another; build.py and tuning.py are steps the
jobs share, not jobs.
"""

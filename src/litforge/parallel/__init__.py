"""Distributed training glue: sharding and tensor-parallel plans, strategy subclasses, Hydra-aware rank launching.

- :mod:`litforge.parallel.plans`: FSDP2 `fully_shard` units and tensor-parallel plans, applied to a task's net from
  `LitforgeTask.configure_model()` under Lightning's `ModelParallelStrategy`.
- :mod:`litforge.parallel.strategies`: small Lightning strategy subclasses (model parallel with `auto` sizes that
  fill the world, post-local-SGD DDP that also works without CUDA).
- :mod:`litforge.parallel.launch`: makes Lightning's per-rank script relaunch reuse the run folder Hydra already
  chose, also inside a multirun.

Importing this package imports nothing heavy; import the submodules where they are used.
"""

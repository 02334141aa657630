"""Deploying a trained image classifier: what `python export.py` is made of, usable piece by piece.

- :mod:`litforge.deploy.net`: the plain fp32 net of a checkpoint (any wrapper's key prefixes stripped), run in
  batches.
- :mod:`litforge.deploy.preprocess`: the net behind its training normalisation, taking uint8 or [0, 1] images (what
  every exported variant takes).
- :mod:`litforge.deploy.metadata`: the deployer's facts (input, classes, version, commit) in each `.onnx` file.
- :mod:`litforge.deploy.onnx`: ONNX export with a dynamic batch axis, `onnx.checker`, onnxruntime sessions and
  the parity check against PyTorch.
- :mod:`litforge.deploy.quantize`: the int8 variants: torchao dynamic, onnxruntime dynamic, onnxruntime static
  QDQ calibrated on training images, and a QAT run's saved int8 model.
- :mod:`litforge.deploy.report`: sizes, sparsity, accuracy and latency of every variant, the recommendation, and
  `compression_report.{csv,md}`.
- :mod:`litforge.deploy.latency`: the one latency harness behind the report and benchmarks/inference.py.

The job itself (`litforge.jobs.export.export`) only strings these together. Importing this package imports nothing
heavy; import the submodules where they are used.
"""

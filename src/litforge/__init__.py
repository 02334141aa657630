"""litforge: a PyTorch Lightning + Hydra training template.

Importing the package is cheap on purpose (no torch): `python train.py --help` and config composition must stay
fast, so heavy modules are imported only by the code paths that need them.
"""

__version__ = "0.1.0"

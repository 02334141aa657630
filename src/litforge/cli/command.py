"""The `litforge` command: `litforge <job> [overrides]` from any folder, and `litforge new <folder>`.

`litforge train model=cnn` is `python train.py model=cnn` of a clone: the same `litforge.cli.main.main("train")`,
so the same fast `--help`, checks, errors and summary. The job word is taken off the command line before Hydra
reads it, and kept for what must repeat the command: a DDP rank that Lightning starts (litforge.parallel.launch) and
Hydra's shell completion, whose bash function calls `litforge -sc query=bash` with the whole typed line in
`COMP_LINE` (so the job is read from there). Free of torch: `litforge --help` answers at once.
"""

from __future__ import annotations

import difflib
import os
import sys

from litforge import __version__
from litforge.cli import main as cli
from litforge.cli.main import JOBS
from litforge.parallel import launch
from litforge.scaffold import new_command

USAGE = """\
usage: litforge <job> [group=option ...] [key=value ...]     (litforge <job> --help: the job's groups and keys)
       litforge new <folder>                                 a project of your own, ready to train and test

jobs:
  train      train a model (conf/train.yaml; in a project: the project's top config)
  eval       test a checkpoint: litforge eval ckpt_path=<file.ckpt>
  predict    predictions for new inputs or the test split: litforge predict ckpt_path=<file.ckpt> [input=<path>]
  export     ONNX (and int8 variants) with a parity check: litforge export ckpt_path=<file.ckpt>
  generate   text from a language model's checkpoint: litforge generate ckpt_path=<file.ckpt>
  prepare    LitData shards from a datamodule: litforge prepare data=digits output=<folder>
  new        write a project of your own: litforge new <folder> (docs/extending.md)

In a folder whose pyproject.toml has [tool.litforge] (what `litforge new` writes), the project's conf/ is searched
before litforge's configs and its top config is composed. Tab completion: eval "$(litforge train -sc install=bash)"
"""


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if _is_completion_query(args):
        _complete(args)
        return
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        sys.exit(0)
    if args[0] in ("-sc", "--shell-completion"):  # `litforge -sc install=bash`: the script is the same for every job
        run("train", args)
        return
    if args[0] == "--version":
        print(f"litforge {__version__}")
        sys.exit(0)
    job, rest = args[0], args[1:]
    if job == "new":
        sys.exit(new_command(rest))
    if job not in JOBS:
        if "=" in job or job.startswith("-"):
            hint = f"name the job first, e.g. litforge train {' '.join(args)}"
        else:
            match = difflib.get_close_matches(job, [*JOBS, "new"], n=1)
            hint = f"did you mean litforge {match[0]}?" if match else "litforge --help lists them"
        print(f"litforge: error: {job} is not a job ({', '.join([*JOBS, 'new'])}): {hint}", file=sys.stderr)
        sys.exit(1)
    run(job, rest)


def run(job: str, rest: list[str]) -> None:
    """Run `litforge <job> <rest>` as `main(job)` with `rest` as the command line."""
    sys.argv = [sys.argv[0], *rest]
    launch.ENTRY_ARGS[:] = [job]  # a DDP rank is started as `litforge <job> ...` too
    cli.main(job, command=f"litforge {job}")


def _is_completion_query(args: list[str]) -> bool:
    return any(a in ("-sc", "--shell-completion") for a in args) and any(a.startswith("query=") for a in args)


def _complete(args: list[str]) -> None:
    """Hydra's completion asks `litforge -sc query=bash` with the line in COMP_LINE: complete the job word, or hand
    the rest of the line to the job's own completion."""
    words = os.environ.get("COMP_LINE", "").split()
    line = os.environ.get("COMP_LINE", "")
    if len(words) < 2 or (len(words) == 2 and not line.endswith(" ")):
        typed = words[1] if len(words) == 2 else ""
        print(" ".join(j for j in [*JOBS, "new"] if j.startswith(typed)))
        return
    job = words[1]
    if job not in JOBS:
        return
    os.environ["COMP_LINE"] = line.replace(job, "", 1)  # what `python <job>.py` would have typed after the script
    run(job, [a for a in args if a != job])

"""`python -m litforge.data.prepare data=<dm> output=<folder or s3://bucket/path>`: write LitData shards.

A root script in package form (like train.py): it only hands the job name to the CLI; the job is litforge.prepare.
"""

from litforge.cli import main

if __name__ == "__main__":
    main("prepare")

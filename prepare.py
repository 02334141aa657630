"""Write LitData shards from any image datamodule: `python prepare.py data=<dm> output=<folder or s3://...>`."""

from litforge.cli.main import main

if __name__ == "__main__":
    main("prepare")

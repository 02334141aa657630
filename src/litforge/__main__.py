"""`python -m litforge <job> ...`: the `litforge` command where its script is not on PATH."""

from litforge.cli.command import main

if __name__ == "__main__":
    main()

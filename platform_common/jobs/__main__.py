"""`python -m platform_common.jobs <command>`: the operator CLI (platform_common.jobs.cli)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m platform_common.jobs"))

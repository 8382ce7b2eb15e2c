"""`python -m nestbed` runs the command line."""

from nestbed.cli import run

run()

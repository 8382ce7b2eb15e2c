"""`python -m nestbed` runs the command line."""

from nestbed.cli import main_entry as run

run()

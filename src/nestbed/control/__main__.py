"""`python -m nestbed.control --start FILE`: the controller process, as the life cycle starts
it (ControllerClient.launch)."""

import os
import sys

from nestbed.control.controller import main

code = main()
# Every table was closed and flushed when the run finished; the interpreter's own teardown
# (module cleanup, a few hundred ms) would only keep swap-out waiting for this process.
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)

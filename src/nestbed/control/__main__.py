"""`python -m nestbed.control --start FILE`: the controller process, as the life cycle starts
it (ControllerClient.launch)."""

import sys

from nestbed.control.controller import main

sys.exit(main())

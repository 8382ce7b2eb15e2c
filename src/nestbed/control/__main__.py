"""`python -m nestbed.control`: the controller process, as swap-in starts it."""

import sys

from nestbed.control.daemon import main

sys.exit(main())

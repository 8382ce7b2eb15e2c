"""What every test shares: none of them reads the user's configuration file
(``nestbed.settings``), whose ``cluster:`` or ``server:`` would send the tests' commands to a
real cluster or server. Set at import, so session fixtures and every command a test starts
see it too; the tests of the file itself set their own."""

from __future__ import annotations

import os

os.environ["NESTBED_CONFIG"] = os.devnull

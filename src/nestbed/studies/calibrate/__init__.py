"""`nestbed calibrate`: the instrument calibrated as in the calibration paper (Ghatge et al.),
loss at three points and delay over packet and burst size, untuned and tuned (docs/calibrate.md)."""

from __future__ import annotations

from nestbed.studies.calibrate.settings import Settings, check
from nestbed.studies.calibrate.study import Outcome, compare, plan_targets, run

__all__ = ["Outcome", "Settings", "check", "compare", "plan_targets", "run"]

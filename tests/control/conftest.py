"""Fixtures of the controller tests (see control_helpers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from control_helpers import FakeExperiment

from nestbed.backend.fake import ROOT_ENV


@pytest.fixture
def fake(tmp_path, monkeypatch) -> Iterator:
    """fake(TEXT): an experiment from YAML TEXT, swapped in on the fake back end; finished,
    shut down and swapped out at the end however the test ends."""
    monkeypatch.setenv(ROOT_ENV, str(tmp_path / "fake"))  # the controller's fake machine too
    made: list[FakeExperiment] = []

    def make(text: str) -> FakeExperiment:
        made.append(FakeExperiment(tmp_path, text))
        return made[-1]

    yield make
    for experiment in made:
        experiment.close()

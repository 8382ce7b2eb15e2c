"""An experiment file uploaded to the server, parsed as the CLI parses a file on disk.

The text is written alone into a private temporary folder and read with ``nestbed.spec.load``,
so an ns file runs in the front end's Tcl safe interpreter (no exec, sockets or writes, reads
only beside the file: here, nothing), bounded in time and memory; a YAML file is read with
safe YAML. Problems come back as ``SpecError`` with file:line, as on the command line.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from nestbed.errors import UserError
from nestbed.model import Experiment
from nestbed.server.schemas import ExperimentFile
from nestbed.store.accounts import stored_name


@dataclass(frozen=True)
class Definition:
    """A parsed upload: the experiment's name in its project, and the stored definition
    (under the name ``PROJECT--NAME``, unique on the machine)."""

    name: str
    experiment: Experiment
    source_text: str
    source_format: str
    source_file: str

    def fields(self) -> dict[str, str]:
        """As ``Store.create_experiment`` and ``update_ir`` take it."""
        return dict(source_text=self.source_text, source_format=self.source_format,
                    source_file=self.source_file, ir_json=self.experiment.to_json())  # fmt: skip


def parse(project: str, upload: ExperimentFile, max_bytes: int) -> Definition:
    """Parses ``upload`` for ``project``; ``SpecError`` (file:line) or ``UserError``."""
    from nestbed.spec import load

    size = len(upload.text.encode("utf-8"))
    if size > max_bytes:
        raise UserError(
            f"{upload.file_name} is {size} bytes, more than the server's limit of {max_bytes}"
        )
    with tempfile.TemporaryDirectory(prefix="nestbed-upload-") as folder:
        path = Path(folder) / upload.file_name
        path.write_text(upload.text, encoding="utf-8")
        loaded = load(path, name=upload.name, parameters=upload.parameters)
    name = loaded.experiment.name
    if len(name) > 64:
        raise UserError(f"experiment name {name!r} is longer than 64 characters; pass a name")
    exp = loaded.experiment.model_copy(update={"name": stored_name(project, name)})
    return Definition(name=name, experiment=exp, source_text=loaded.text,
                      source_format=loaded.format, source_file=upload.file_name)  # fmt: skip

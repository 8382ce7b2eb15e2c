"""The JSON Schemas of the YAML file format and of the IR, generated from their models.

`python -m nestbed.spec.schema --write` refreshes `schemas/`; a test checks they are current.
Editors can validate experiment files with `schemas/experiment.schema.json`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nestbed.model.ir import Experiment
from nestbed.spec.document import ExperimentDoc

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "schemas"


def schemas() -> dict[str, str]:
    """File name -> schema text."""
    out = {}
    for file, model, title in (
        ("experiment.schema.json", ExperimentDoc, "nestbed experiment file (YAML)"),
        ("ir.schema.json", Experiment, "nestbed experiment IR"),
    ):
        schema = model.model_json_schema()
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": title,
            **schema,
        }
        out[file] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def main(argv: list[str]) -> int:
    if argv[1:] != ["--write"]:
        print("usage: python -m nestbed.spec.schema --write", file=sys.stderr)
        return 2
    SCHEMA_DIR.mkdir(exist_ok=True)
    for file, text in schemas().items():
        (SCHEMA_DIR / file).write_text(text, encoding="utf-8")
        print(f"wrote schemas/{file}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

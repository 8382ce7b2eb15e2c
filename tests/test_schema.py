"""The JSON Schemas in schemas/ are current, and they validate the example YAML files."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from nestbed.spec.schema import SCHEMA_DIR, schemas

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))


def test_committed_schemas_are_current():
    for file, text in schemas().items():
        assert (SCHEMA_DIR / file).read_text() == text, (
            f"run `make schemas` to refresh schemas/{file}"
        )


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_validate_against_the_file_schema(path):
    schema = json.loads((SCHEMA_DIR / "experiment.schema.json").read_text())
    from nestbed.spec.yaml import _Loader

    jsonschema.validate(yaml.load(path.read_text(), Loader=_Loader), schema)


def test_schema_rejects_unknown_keys():
    schema = json.loads((SCHEMA_DIR / "experiment.schema.json").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"nodes": [{"name": "a", "colour": "red"}]}, schema)

"""The published JSON Schemas: in step with the models, and enough on their own for other tools."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from ckptspec._jsonschema import KINDS, markdown_reference, schema_filename, schema_text

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


def published(repo: Path, kind: str) -> dict:
    return json.loads((repo / "schema" / schema_filename(kind)).read_text())


@pytest.mark.parametrize("kind", KINDS)
def test_published_schema_matches_the_models(repo: Path, kind: str) -> None:
    assert (repo / "schema" / schema_filename(kind)).read_text() == schema_text(kind), (
        "schema/ drifted from the models: run `ckptspec schema --write`"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_published_schema_is_a_valid_draft_2020_12_schema(repo: Path, kind: str) -> None:
    document = published(repo, kind)
    jsonschema.Draft202012Validator.check_schema(document)
    assert document["$id"] == f"urn:ckptspec:schema:{kind}:v1"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate_with_jsonschema_alone(repo: Path, example: Path) -> None:
    document = yaml.safe_load(example.read_text())
    validator = jsonschema.Draft202012Validator(published(repo, document["kind"]))
    assert [error.message for error in validator.iter_errors(document)] == []


def test_jsonschema_alone_rejects_what_the_models_reject(repo: Path) -> None:
    document = yaml.safe_load((repo / "examples" / "spec.yaml").read_text())
    document["components"]["fingerprint"]["atol"] = -1
    document["components"]["optimiser"] = {}
    validator = jsonschema.Draft202012Validator(published(repo, "spec"))
    messages = sorted(error.message for error in validator.iter_errors(document))
    assert len(messages) == 2
    assert "-1 is less than the minimum of 0" in messages
    assert any("'optimiser' was unexpected" in message for message in messages)


@pytest.mark.parametrize("kind", KINDS)
def test_reference_pages_match_the_models(repo: Path, kind: str) -> None:
    assert (repo / "docs" / "reference" / f"{kind}.md").read_text() == markdown_reference(kind), (
        "docs/reference drifted from the models: run `make generate`"
    )

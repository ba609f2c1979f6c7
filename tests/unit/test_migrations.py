"""The migration path, exercised with a throwaway major 0 that only exists in this test."""

from __future__ import annotations

from typing import Any

import pytest

from ckptspec import SCHEMA_VERSION, Spec, UnsupportedVersionError, parse_document
from ckptspec._migrations import MigrationRegistry, SchemaVersion, default_registry

V0_SPEC = """\
ckptspec: "0.3"
kind: spec
project: legacy-model
needs: [model, optimizer]
fingerprint_tolerance: 0.01
"""


def lift_v0(document: dict[str, Any]) -> dict[str, Any]:
    needs = document.pop("needs")
    tolerance = document.pop("fingerprint_tolerance")
    components: dict[str, Any] = {
        name: {"require": "required" if name in needs else "optional"} for name in ("model", "optimizer", "rng")
    }
    components["fingerprint"] = {"atol": tolerance}
    name = document.pop("project")
    return {**document, "name": name, "components": components}


@pytest.fixture
def registry() -> MigrationRegistry:
    registry = MigrationRegistry()
    registry.register(0)(lift_v0)
    return registry


def test_v0_document_is_migrated_then_validated(registry: MigrationRegistry) -> None:
    spec = parse_document(V0_SPEC, registry=registry)
    assert isinstance(spec, Spec)
    assert spec.ckptspec == SCHEMA_VERSION  # a migration lifts a document to the current minor of its new major
    assert spec.name == "legacy-model"
    assert spec.components.rng.require == "optional"
    assert spec.components.fingerprint.atol == 0.01


def test_without_a_registered_step_the_version_is_refused() -> None:
    with pytest.raises(
        UnsupportedVersionError, match=r"^old.yaml:1:11: ckptspec: schema 0.3 cannot be migrated: no migration from major 0$"
    ):
        parse_document(V0_SPEC, source="old.yaml", registry=default_registry)


def test_a_broken_migration_output_is_reported_without_line_numbers(registry: MigrationRegistry) -> None:
    registry.steps[0] = lambda document: {**document, "name": "", "needs": None}
    with pytest.raises(Exception) as caught:
        parse_document(V0_SPEC, source="old.yaml", registry=registry)
    assert "old.yaml: name:" in str(caught.value)
    assert "old.yaml:" + "1" not in str(caught.value).split(": name")[0]


def test_registering_twice_is_an_error(registry: MigrationRegistry) -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register(0)(lift_v0)


@pytest.mark.parametrize("text", ["1", "1.0.0", "v1.0", "01.0", ""])
def test_version_parsing_is_strict(text: str) -> None:
    with pytest.raises(ValueError, match="is not a schema version"):
        SchemaVersion.parse(text)


def test_versions_order_numerically() -> None:
    assert SchemaVersion.parse("1.10") > SchemaVersion.parse("1.9") > SchemaVersion.parse("0.99")

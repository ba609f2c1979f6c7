"""The published JSON Schemas, generated from the pydantic models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._migrations import CURRENT
from ._models import Manifest, Spec

__all__ = ["KINDS", "json_schema", "markdown_reference", "published_path", "schema_filename", "schema_text"]

KINDS = ("spec", "manifest")
_MODELS = {"spec": Spec, "manifest": Manifest}


def schema_filename(kind: str) -> str:
    return f"{kind}-v{CURRENT.major}.json"


def json_schema(kind: str) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) for one document kind at the current major version."""
    generated = _MODELS[kind].model_json_schema(mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:ckptspec:schema:{kind}:v{CURRENT.major}",
        **generated,
        "title": f"ckptspec {kind}, schema version {CURRENT.major}",
    }


def schema_text(kind: str) -> str:
    return json.dumps(json_schema(kind), indent=2, sort_keys=False) + "\n"


def published_path(directory: Path, kind: str) -> Path:
    return directory / schema_filename(kind)


def markdown_reference(kind: str) -> str:
    """A page per document kind: every object of the schema as a table of its fields."""
    schema = json_schema(kind)
    definitions = schema.get("$defs", {})
    lines = [
        f"# {kind.capitalize()} reference (schema v{CURRENT.major})",
        "",
        f"Generated from the models by `ckptspec schema --kind {kind} --format markdown`; "
        f"the JSON Schema is `schema/{schema_filename(kind)}`. Unknown keys are errors everywhere.",
        "",
    ]
    lines += _object_section(schema, heading=f"`{kind}` document")
    for name in sorted(definitions):
        if definitions[name].get("type") == "object":
            lines += _object_section(definitions[name], heading=f"{name}")
        elif "enum" in definitions[name]:
            values = ", ".join(f"`{value}`" for value in definitions[name]["enum"])
            lines += [f"## {name}", "", f"One of: {values}.", ""]
    return "\n".join(lines).rstrip() + "\n"


def _object_section(schema: dict[str, Any], heading: str) -> list[str]:
    required = set(schema.get("required", []))
    lines = [f"## {heading}", ""]
    if schema.get("description"):
        lines += [schema["description"].strip(), ""]
    lines += ["| key | type | required | default | meaning |", "|---|---|---|---|---|"]
    for field, spec in schema.get("properties", {}).items():
        default = json.dumps(spec["default"]) if "default" in spec else ""
        meaning = (spec.get("description") or "").replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| `{field}` | {_type_of(spec)} | {'yes' if field in required else ''} | {default} | {meaning} |"
        )
    return [*lines, ""]


def _type_of(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in spec:
        return " or ".join(_type_of(option) for option in spec["anyOf"])
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    if "enum" in spec:
        return " \\| ".join(f"`{value}`" for value in spec["enum"])
    kind = spec.get("type", "any")
    if kind == "array":
        return f"list of {_type_of(spec.get('items', {}))}"
    if kind == "object" and isinstance(spec.get("additionalProperties"), dict):
        return f"map of {_type_of(spec['additionalProperties'])}"
    if "pattern" in spec:
        return f"{kind} matching `{spec['pattern']}`".replace("|", "\\|")
    return str(kind)

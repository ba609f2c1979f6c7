"""The published JSON Schemas, generated from the pydantic models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._migrations import CURRENT
from ._models import Manifest, Spec

__all__ = ["KINDS", "json_schema", "published_path", "schema_filename", "schema_text"]

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

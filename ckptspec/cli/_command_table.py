"""Which module declares each command, and what `ckptspec --help` says of it."""

from __future__ import annotations

__all__ = ["COMMAND_MODULES", "COMMAND_SUMMARIES"]

# Each command's module is imported only when that command runs (or help lists them all), so
# `ckptspec inspect` on a large checkpoint does not pay for the document models and the validator.
COMMAND_MODULES = {
    "audit": "validate",
    "diff": "validate",
    "init": "documents",
    "intake": "intake",
    "inspect": "inspect",
    "lineage": "lineage",
    "lint": "documents",
    "manifest": "validate",
    "rule": "validate",
    "schema": "documents",
    "sign": "sign",
    "validate": "validate",
}


# What `ckptspec --help` lists, so the listing imports no command module (`test_cli_documents`
# checks each line against the command's own help).
COMMAND_SUMMARIES = {
    "audit": "Validate every checkpoint found under PATHS (directories,...",
    "diff": "Show what differs between two checkpoints or manifests:...",
    "init": "Write a commented starter spec to stdout (or --output).",
    "intake": "Check registered model versions (models:/NAME/VERSION or...",
    "inspect": "Show what a checkpoint file or TensorFlow prefix holds,...",
    "lineage": "Check that the checkpoints under PATHS are unbroken runs:...",
    "lint": "Validate spec and manifest files against the schema.",
    "manifest": "Write the manifest for a checkpoint that has none (adoption...",
    "rule": "Print a rule's documentation (by code or name), or the table...",
    "schema": "Print, check or regenerate the published JSON Schemas.",
    "sign": "Sign the checkpoint at PATH (file, TensorFlow prefix or...",
    "validate": "Check one checkpoint (file, TensorFlow prefix, or a directory...",
}

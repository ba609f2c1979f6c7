"""Checkpoints written by real training, with their manifests, validate clean (exit 0)."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import run_cli

from ckptspec import validate


def test_lightning_checkpoint_validates_clean(lightning_checkpoint: Path) -> None:
    code, out, _ = run_cli("validate", lightning_checkpoint)
    assert code == 0, out
    assert f"{lightning_checkpoint}: ok (lightning, spec tiny-lightning)" in out


def test_plain_torch_checkpoint_validates_clean(torch_checkpoint: Path) -> None:
    result = validate(torch_checkpoint)
    assert (result.format, result.findings) == ("torch", [])


def test_tf_bundles_validate_clean(tf_checkpoints: dict[str, Path]) -> None:
    for name in ("latest", "first", "sharded"):
        result = validate(tf_checkpoints[name])
        assert (result.format, result.findings) == ("tf-bundle", []), name


def test_tf_directory_validates_the_latest_checkpoint(tf_checkpoints: dict[str, Path]) -> None:
    assert validate(tf_checkpoints["run"]).checkpoint == str(tf_checkpoints["latest"])


def test_lightning_directory_with_one_checkpoint_is_accepted(lightning_checkpoint: Path) -> None:
    code, out, _ = run_cli("validate", lightning_checkpoint.parent.parent, "--format", "json")
    document = json.loads(out)
    assert (code, document["results"][0]["checkpoint"]) == (0, str(lightning_checkpoint))


def test_adopted_manifest_records_what_it_could_not_know(lightning_checkpoint: Path) -> None:
    text = Path(f"{lightning_checkpoint}.ckptspec.yaml").read_text()
    assert "unknown:" in text and "- rng" in text and "optimizer.type" in text
    assert "at: /lr_schedulers/0" in text and "at: /optimizer_states/0" in text

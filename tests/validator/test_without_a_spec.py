"""A manifest written without a spec is judged by what it records; CKS004 warns unless a spec is required."""

from __future__ import annotations

import json
import logging
import shutil
import warnings
from pathlib import Path

import pytest

from ckptspec.lightning import CkptspecCallback

from ._lightning_training import fit
from .conftest import run_cli


@pytest.fixture(scope="module")
def specless_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit(tmp_path_factory.mktemp("specless"), [CkptspecCallback()])


def _findings(*args: str | Path) -> tuple[int, list[tuple[str, str]]]:
    code, out, _ = run_cli("validate", *args, "--format", "json")
    return code, [(f["code"], f["severity"]) for f in json.loads(out)["results"][0]["findings"]]


def test_the_default_callback_writes_a_checkpoint_that_validates_with_a_warning(specless_checkpoint: Path) -> None:
    assert _findings(specless_checkpoint) == (0, [("CKS004", "warning")])


def test_require_spec_makes_the_missing_spec_an_error(specless_checkpoint: Path) -> None:
    assert _findings(specless_checkpoint, "--require-spec") == (1, [("CKS004", "error")])
    code, _, _ = run_cli("audit", specless_checkpoint.parent, "--require-spec")
    assert code == 1


def test_what_the_manifest_records_is_still_checked(specless_checkpoint: Path, tmp_path: Path) -> None:
    copy = tmp_path / specless_checkpoint.name
    shutil.copy(specless_checkpoint, copy)
    shutil.copy(f"{specless_checkpoint}.ckptspec.yaml", f"{copy}.ckptspec.yaml")
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(data)
    code, findings = _findings(copy)
    assert code == 1 and ("CKS004", "warning") in findings and any(severity == "error" for _, severity in findings)

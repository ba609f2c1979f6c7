"""Each file is sniffed for its format once per command: discovery's detection is what judging
takes, unless the file changed in between."""

from __future__ import annotations

import collections
import pickle
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from ckptspec import _discover  # noqa: E402
from ckptspec._discover import discover  # noqa: E402
from ckptspec._validate import audit, validate  # noqa: E402
from ckptspec.adopt import adopt  # noqa: E402
from ckptspec.diff import diff  # noqa: E402
from ckptspec.formats import detect  # noqa: E402


@pytest.fixture
def sniffs(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[Path]:
    """How often each file's content is sniffed, by whichever module asks."""
    counted: collections.Counter[Path] = collections.Counter()
    real = detect.sniff

    def counting(path: Path) -> detect.FileFormat | None:
        counted[Path(path)] += 1
        return real(path)

    monkeypatch.setattr(detect, "sniff", counting)
    monkeypatch.setattr(_discover, "sniff", counting)
    return counted


def _adopted(path: Path, step: int) -> Path:
    path.parent.mkdir(exist_ok=True)
    torch.save({"state_dict": {"w": torch.full((4,), float(step))}, "step": step}, path)
    adopt(path)
    return path


def test_validate_of_a_file_sniffs_it_once(tmp_path: Path, sniffs: collections.Counter[Path]) -> None:
    checkpoint = _adopted(tmp_path / "last.pt", 1)
    sniffs.clear()
    assert validate(checkpoint).passed
    assert sniffs == {checkpoint: 1}


def test_validate_of_a_model_directory_sniffs_its_checkpoint_once(tmp_path: Path, sniffs: collections.Counter[Path]) -> None:
    checkpoint = _adopted(tmp_path / "model" / "weights.pt", 1)
    sniffs.clear()
    assert validate(checkpoint.parent).passed
    assert sniffs[checkpoint] == 1


def test_audit_sniffs_each_checkpoint_once(tmp_path: Path, sniffs: collections.Counter[Path]) -> None:
    checkpoints = [_adopted(tmp_path / "run" / f"step-{step}.pt", step) for step in range(3)]
    sniffs.clear()
    report = audit([tmp_path / "run"], jobs=1)
    assert report.passed and len(report.results) == 3
    assert {path: sniffs[path] for path in checkpoints} == {path: 1 for path in checkpoints}


def test_adopt_sniffs_the_checkpoint_once(tmp_path: Path, sniffs: collections.Counter[Path]) -> None:
    checkpoint = tmp_path / "last.pt"
    torch.save({"state_dict": {"w": torch.zeros(4)}, "step": 1}, checkpoint)
    adopt(checkpoint)
    assert sniffs == {checkpoint: 1}


def test_diff_sniffs_each_checkpoint_once(tmp_path: Path, sniffs: collections.Counter[Path]) -> None:
    first, second = _adopted(tmp_path / "a" / "last.pt", 1), _adopted(tmp_path / "b" / "last.pt", 2)
    sniffs.clear()
    assert any(change.section == "tensors" for change in diff(first, second).changes)
    assert sniffs == {first: 1, second: 1}


def test_a_file_replaced_after_discovery_is_detected_again(tmp_path: Path) -> None:
    checkpoint = _adopted(tmp_path / "run" / "step-1.pt", 1)
    found = discover([tmp_path / "run"])
    assert found.detected[checkpoint].checkpoint.kind == "torch-zip"

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            import os

            return os.system, ("true",)

    checkpoint.write_bytes(pickle.dumps(Payload(), protocol=2))  # swapped for a bare pickle that runs code
    # Without the identity check, judging would read it as the torch archive discovery saw.
    result = audit([tmp_path / "run"], discovery=found).results[0]
    assert result.format is None or result.format == "pickle"
    assert any(finding.code == "CKS401" and "system" in finding.message for finding in result.findings)

"""Values no parser of Python's should meet unchecked: a YAML scalar whose explicit tag or resolved type
it does not fit, a date that does not exist, an integer of thousands of digits (in a document or in a
pickle) is refused with the file and place named, never an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ckptspec import validate
from ckptspec.cli import cli

_MALFORMED = {
    "decimal integer of 5000 digits": "9" * 5000,
    "hexadecimal integer of 5000 digits": "0x" + "f" * 5000,
    "binary integer of 2000 digits": "0b" + "1" * 2000,
    "month 13": "2026-13-01",
    "February 30": "2026-02-30 12:00:00",
    "tagged timestamp": "!!timestamp 'not a time'",
    "tagged int": "!!int 'twelve'",
    "tagged float": "!!float 'x'",
    "tagged bool": "!!bool 'maybe'",
}


@pytest.mark.parametrize("scalar", _MALFORMED)
def test_a_malformed_scalar_in_a_spec_exits_2_naming_its_line(torch_file: Path, tmp_path: Path, scalar: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f'ckptspec: "1.1"\nkind: spec\nname: hostile\ndescription: {_MALFORMED[scalar]}\n')

    outcome = CliRunner().invoke(cli, ["validate", str(torch_file), "--spec", str(spec)])

    assert outcome.exit_code == 2, outcome.output
    assert f"{spec}:4:14: " in outcome.output and "is not a valid" in outcome.output, outcome.output


@pytest.mark.parametrize("scalar", _MALFORMED)
def test_a_malformed_scalar_in_a_manifest_is_a_finding(torch_file: Path, tmp_path: Path, scalar: str) -> None:
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(torch_file.read_bytes())
    manifest = tmp_path / "model.pt.ckptspec.yaml"
    manifest.write_text(f'ckptspec: "1.1"\nkind: manifest\nformat: torch\ncheckpoint: model.pt\ncreated: {_MALFORMED[scalar]}\n')

    result = validate(checkpoint)

    (unreadable,) = [f.message for f in result.findings if f.code == "CKS003"]
    assert unreadable.startswith(f"{manifest}:5:10: ") and "is not a valid" in unreadable


def test_an_integer_beyond_1024_bits_in_a_pickle_is_named_where_it_lies(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    checkpoint = tmp_path / "model.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(2)}, "hyper_parameters": {"seed": 2**5000}}, checkpoint)

    for command in (["inspect"], ["manifest"]):
        outcome = CliRunner().invoke(cli, [*command, str(checkpoint)])
        assert outcome.exit_code != 0 and "internal error" not in outcome.output, outcome.output
        assert "data.pkl cannot be read: the integer at byte" in outcome.output and "1024 bits" in outcome.output


def test_an_integer_within_1024_bits_is_read_and_recorded(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    checkpoint = tmp_path / "model.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(2)}, "hyper_parameters": {"seed": -(2**1000), "big": 2**1020}}, checkpoint)

    assert CliRunner().invoke(cli, ["manifest", str(checkpoint)]).exit_code == 0
    result = validate(checkpoint)
    assert not [f for f in result.findings if f.severity == "error"], result.findings

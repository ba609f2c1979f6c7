"""The indented JSON of reports is the standard library's, character for character."""

from __future__ import annotations

import enum
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptspec import audit
from ckptspec._json_text import indented_json
from ckptspec.report import render_json, render_sarif

_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
_VALUES = st.recursive(
    _SCALARS,
    lambda children: st.lists(children, max_size=4) | st.tuples(children, children) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_any_json_value_is_written_as_the_standard_encoder_writes_it(value: Any) -> None:
    assert indented_json(value) == json.dumps(value, indent=2)


class _Colour(str, enum.Enum):
    RED = "red"


class _Level(enum.IntEnum):
    HIGH = 3


@pytest.mark.parametrize(
    "value",
    [
        {"level": _Colour.RED, "n": _Level.HIGH},
        {"special": [math.nan, math.inf, -math.inf, -0.0, 1e300, 2**80]},
        {"text": "é\u2028\x00\"\\\n\ud800 🙂"},
        {"empty": [[], {}, ()], "deep": [[[[{}]]]]},
        {1: "a number as a key", False: "a boolean", None: "null", 2.5: "a float"},
    ],
    ids=["enumerations", "special numbers", "escapes", "empty containers", "keys that are not strings"],
)
def test_the_values_the_standard_encoder_treats_specially(value: Any) -> None:
    assert indented_json(value) == json.dumps(value, indent=2)


def test_what_the_standard_encoder_refuses_is_refused_the_same_way() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        indented_json({"path": Path("x")})
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular reference"):
        indented_json(looped)


def test_a_real_audit_report_is_byte_identical(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"model": torch.nn.Linear(4, 4).state_dict(), "step": 7}, tmp_path / "good.pt")
    (tmp_path / "truncated.pt").write_bytes((tmp_path / "good.pt").read_bytes()[:300])
    report = audit([tmp_path])
    assert len(report.results) == 2 and not report.passed

    assert render_json(report) == json.dumps(json.loads(render_json(report)), indent=2) + "\n"
    assert render_sarif(report) == json.dumps(json.loads(render_sarif(report)), indent=2) + "\n"

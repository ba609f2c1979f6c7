"""YAML aliases: a block named once and reused is fine; aliases that multiply are refused where they start."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ckptspec import DocumentError, load_spec
from ckptspec._yaml import ALIAS_NODE_LIMIT, load_yaml

from .conftest import run_cli

_HEAD = 'ckptspec: "1.0"\nkind: spec\nname: laughs\nframework: torch\n'


def _laughs(levels: int) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return _HEAD + "\n".join(lines) + f"\ncomponents:\n  model:\n    require: required\n    allow_missing: *l{levels - 1}\n"


def test_a_billion_laughs_spec_is_refused_at_its_line_by_lint(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(_laughs(10))  # 9^10 strings once expanded
    started = time.process_time()
    code, out, err = run_cli("lint", spec)
    assert time.process_time() - started < 5
    message = f"aliases expand to more than {ALIAS_NODE_LIMIT} nodes (a 'billion laughs' document)"
    assert code != 0 and f"{spec}:10:10: {message}" in out + err
    with pytest.raises(DocumentError, match=f"^{spec}:10:10: "):
        load_spec(spec)


def test_anchors_that_save_repeating_a_block_still_load() -> None:
    text = "base: &base {lr: 0.1, momentum: 0.9}\nfirst: *base\nsecond: {<<: *base, lr: 0.2}\n"
    assert load_yaml(text).data == {
        "base": {"lr": 0.1, "momentum": 0.9},
        "first": {"lr": 0.1, "momentum": 0.9},
        "second": {"lr": 0.2, "momentum": 0.9},
    }


@pytest.mark.parametrize("text", ["a: &a [1, *a]\n", "a: &a [1]\nb: &a [2, *a]\n"])
def test_an_alias_inside_its_own_anchor_is_refused(text: str) -> None:
    with pytest.raises(DocumentError, match=r"^<string>:\d+:\d+: alias 'a' refers to a node that contains it"):
        load_yaml(text)

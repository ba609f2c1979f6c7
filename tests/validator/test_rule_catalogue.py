"""The rule catalogue: stable, documented, and its generated docs never drift from the docstrings."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import run_cli

from ckptspec.checks import FAMILIES, RULES, SECTIONS, rule_by_code
from ckptspec.checks._docs import rule_pages

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules"


def test_codes_follow_the_family_numbering() -> None:
    first_digit = {family: str(index) for index, family in enumerate(FAMILIES)}
    for code, rule in RULES.items():
        assert re.fullmatch(r"CKS\d{3}", code) and code[3] == first_digit[rule.family], code


def test_names_are_unique_kebab_case_problems() -> None:
    names = [rule.name for rule in RULES.values()]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z]+(-[a-z0-9]+)+", name) for name in names)
    assert not [name for name in names if name.startswith("check-")]


def test_every_docstring_has_every_section_with_content() -> None:
    for rule in RULES.values():
        assert all(rule.section(title) for title in SECTIONS), rule.code
        assert rule.summary.endswith(".") and len(rule.summary) < 200, rule.code


def test_committed_rule_pages_match_the_docstrings() -> None:
    expected = rule_pages()
    committed = {path.name: path.read_text(encoding="utf-8") for path in DOCS.glob("*.md")}
    assert committed == expected, "docs/rules is stale: run `make generate`"


def test_rule_command_prints_the_page() -> None:
    code, out, _ = run_cli("rule", "cks207")
    assert code == 0
    assert out.startswith("# CKS207 tensor-checksum-mismatch\n\nFamily: integrity. Default severity: error.")
    assert out.endswith(RULES["CKS207"].doc)


def test_rule_command_finds_by_name_and_lists_all() -> None:
    assert rule_by_code("tensor-shape-mismatch") is RULES["CKS206"]
    code, out, _ = run_cli("rule")
    assert code == 0 and len(out.splitlines()) == len(RULES)


def test_unknown_rule_is_a_usage_error() -> None:
    code, _, err = run_cli("rule", "CKS999")
    assert code == 2 and "no rule 'CKS999'" in err

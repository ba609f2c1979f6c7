"""Generate docs/rules/ from the rules' docstrings: one page per rule and an index table.

    python -m ckptspec.checks._docs docs/rules

tests/validator/test_rule_catalogue.py fails when the committed pages differ from what this writes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._registry import FAMILIES, RULES, Rule

__all__ = ["page_name", "rule_pages", "write_rule_pages"]

_GENERATED = "<!-- generated from the rule's docstring by `python -m ckptspec.checks._docs docs/rules`; do not edit -->"


def page_name(rule: Rule) -> str:
    return f"{rule.code}.md"


def _page(rule: Rule) -> str:
    header = [
        _GENERATED,
        f"# {rule.code} {rule.name}",
        "",
        f"Family: **{rule.family}** · default severity: **{rule.severity}** · {rule.lifecycle.label}",
        "",
    ]
    return "\n".join(header) + "\n" + rule.doc


def _index() -> str:
    lines = [_GENERATED, "# Rules", "", "Every finding carries one of these stable codes. `ckptspec rule CODE` prints a page.", ""]
    for family in FAMILIES:
        lines += [f"## {family}", "", "| code | name | severity | what it checks |", "| --- | --- | --- | --- |"]
        for rule in sorted(RULES.values(), key=lambda rule: rule.code):  # by code, whichever module declares it
            if rule.family == family:
                lines.append(f"| [{rule.code}]({page_name(rule)}) | {rule.name} | {rule.severity} | {rule.summary} |")
        lines.append("")
    return "\n".join(lines)


def rule_pages() -> dict[str, str]:
    """File name → contents of every page under docs/rules/."""
    pages = {page_name(rule): _page(rule) for rule in RULES.values()}
    pages["index.md"] = _index()
    return pages


def write_rule_pages(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("CKS*.md"):
        stale.unlink()
    for name, text in rule_pages().items():
        (directory / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Write one Markdown page per rule, plus an index, from the rule docstrings.")
    parser.add_argument("directory", nargs="?", type=Path, default=Path("docs/rules"))
    write_rule_pages(parser.parse_args().directory)

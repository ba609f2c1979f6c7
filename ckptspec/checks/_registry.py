"""The rule catalogue: one `Rule` per stable code, declared from a class whose docstring is its documentation.

Codes are permanent: a rule that is removed keeps its code reserved (listed in `REDIRECTS` when it was
replaced), and a code is never reused. The docstring is the single source of the rule's docs page, of
`ckptspec rule CODE` and of the SARIF rule description; it has the sections `## What it does`,
`## Why is this bad?`, `## Example` and `## How to fix`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import field
from typing import Literal, Union

from .._dataclass import dataclass
from .._pointer import document_path

__all__ = [
    "FAMILIES",
    "REDIRECTS",
    "RULES",
    "SECTIONS",
    "Family",
    "Finding",
    "Preview",
    "Rule",
    "Severity",
    "Stable",
    "declare",
    "rule_by_code",
]

Severity = Literal["error", "warning", "info"]
Family = Literal["input", "completeness", "integrity", "consistency", "safety", "lineage"]
FAMILIES: tuple[Family, ...] = ("input", "completeness", "integrity", "consistency", "safety", "lineage")
"""`lineage` rules judge a run's checkpoints together (`ckptspec lineage`), never one checkpoint alone."""
SECTIONS = ("What it does", "Why is this bad?", "Example", "How to fix")
_CODE = re.compile(r"^CKS\d{3}$")
_NAME = re.compile(r"^[a-z]+(-[a-z0-9]+)*$")


@dataclass(frozen=True)
class Stable:
    since: str

    @property
    def label(self) -> str:
        return f"stable since {self.since}"


@dataclass(frozen=True)
class Preview:
    since: str

    @property
    def label(self) -> str:
        return f"preview since {self.since}"


Lifecycle = Union[Stable, Preview]


@dataclass(frozen=True)
class Finding:
    """One problem found in one checkpoint, located as precisely as the check can tell.

    `pointer` is the RFC 6901 JSON Pointer of the key or tensor inside the checkpoint's object tree;
    `path` is where the finding sits in the manifest, as the keys and indices leading to it.
    """

    code: str
    name: str
    family: Family
    severity: Severity
    message: str
    checkpoint: str
    file: str | None = None
    pointer: str | None = None
    path: tuple[str | int, ...] = ()

    @property
    def manifest_path(self) -> str:
        """`path` written the way a reader of the YAML finds it: `components.optimizer[0].type`."""
        return document_path(self.path)

    @property
    def location(self) -> str:
        """The most precise place to point a person at: the key or tensor, else the manifest entry."""
        return self.pointer if self.pointer is not None else self.manifest_path

    def to_json(self) -> dict[str, object]:
        return {
            "code": self.code,
            "name": self.name,
            "family": self.family,
            "severity": self.severity,
            "message": self.message,
            "checkpoint": self.checkpoint,
            "file": self.file,
            "pointer": self.pointer,
            "path": list(self.path),
            "manifest_path": self.manifest_path,
        }


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    family: Family
    severity: Severity
    lifecycle: Lifecycle
    doc: str = field(repr=False)

    @property
    def summary(self) -> str:
        """The first sentence of `What it does`, for tables and SARIF `shortDescription`."""
        text = " ".join(self.section("What it does").split())
        return text.split(". ")[0].rstrip(".") + "."

    def section(self, title: str) -> str:
        match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", self.doc, flags=re.S | re.M)
        return match.group(1).strip() if match else ""

    def finding(
        self,
        message: str,
        *,
        checkpoint: str,
        file: str | None = None,
        pointer: str | None = None,
        path: tuple[str | int, ...] = (),
        severity: Severity | None = None,
    ) -> Finding:
        return Finding(
            code=self.code,
            name=self.name,
            family=self.family,
            severity=severity or self.severity,
            message=message,
            checkpoint=checkpoint,
            file=file,
            pointer=pointer,
            path=path,
        )


RULES: dict[str, Rule] = {}
REDIRECTS: dict[str, str] = {}
"""Retired code → the code that replaced it. Empty until a rule is first replaced."""


def declare(
    code: str, name: str, *, family: Family, severity: Severity, lifecycle: Lifecycle = Stable("0.1.0")
) -> Callable[[type], Rule]:
    """Class decorator: turn a documented class into the registered `Rule` of that name."""

    def register(documented: type) -> Rule:
        doc = _dedent(documented.__doc__ or "")
        missing = [title for title in SECTIONS if f"## {title}\n" not in doc]
        if not _CODE.match(code) or not _NAME.match(name) or missing or code in RULES:
            raise ValueError(f"rule {code} {name}: bad code, bad name, duplicate, or missing sections {missing}")
        rule = Rule(code=code, name=name, family=family, severity=severity, lifecycle=lifecycle, doc=doc)
        RULES[code] = rule
        return rule

    return register


def rule_by_code(code_or_name: str) -> Rule | None:
    """A rule by its code (case-insensitive, following redirects) or its kebab-case name."""
    code = REDIRECTS.get(code_or_name.upper(), code_or_name.upper())
    if code in RULES:
        return RULES[code]
    return next((rule for rule in RULES.values() if rule.name == code_or_name), None)


def _dedent(docstring: str) -> str:
    lines = docstring.expandtabs().splitlines()
    indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    margin = min(indents, default=0)
    body = [lines[0].strip()] + [line[margin:] for line in lines[1:]]
    return "\n".join(body).strip() + "\n"

"""The rule catalogue and the checks, one module per family.

Each family module declares its rules (a class per rule whose docstring is the rule's documentation)
and a `check(context)` generator that yields `Finding`s. `FAMILY_CHECKS` runs them in order.
"""

from collections.abc import Callable, Iterator

from . import completeness, consistency, exported_program, integrity, inputs, keras_program, lineage, paths, safety, saves, signature
from ._context import Context
from ._registry import FAMILIES, REDIRECTS, RULES, SECTIONS, Family, Finding, Rule, Severity, Stable, rule_by_code

__all__ = [
    "FAMILIES",
    "FAMILY_CHECKS",
    "REDIRECTS",
    "RULES",
    "SECTIONS",
    "Context",
    "Family",
    "Finding",
    "Rule",
    "Severity",
    "Stable",
    "inputs",
    "rule_by_code",
]

FAMILY_CHECKS: dict[Family, Callable[[Context], Iterator[Finding]]] = {
    "completeness": completeness.check,
    "integrity": integrity.check,
    "consistency": consistency.check,
    "safety": safety.check,
}

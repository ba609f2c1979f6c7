"""The plain records `validate` and `audit` read documents as (`ckptspec._plain`): generated from the
models, answering the checks as the models do, and read without importing pydantic."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from ckptspec import Spec, spec_digest
from ckptspec._documents import read_spec
from ckptspec._models import PicklePolicy
from ckptspec._models.construct import plan_source
from ckptspec._plain import _plan, record
from ckptspec.cli.documents import starter_spec

from .._fast_documents import assert_record_matches

SPEC_TEXT = starter_spec("demo", "torch")


def test_the_plan_is_the_one_the_models_give() -> None:
    assert Path(_plan.__file__).read_text(encoding="utf-8") == plan_source(), "run python -m ckptspec._models.construct --write"


def test_a_record_answers_as_its_model(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC_TEXT)
    plain, model = read_spec(tmp_path / "spec.yaml"), Spec.model_validate(__import__("yaml").safe_load(SPEC_TEXT))
    assert type(plain).__module__ == "ckptspec._plain"
    assert_record_matches(plain, model)
    assert repr(plain) == repr(model)
    assert plain == read_spec(tmp_path / "spec.yaml") and plain != plain.model_copy(update={"name": "other"})
    assert spec_digest(plain) == spec_digest(model)
    assert pickle.loads(pickle.dumps(plain)) == plain


def test_a_record_cannot_be_changed_and_a_copy_leaves_it_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC_TEXT)
    plain = read_spec(tmp_path / "spec.yaml")
    with pytest.raises(AttributeError, match="cannot be changed"):
        plain.name = "other"  # type: ignore[misc]
    copied = plain.model_copy(update={"pickle": plain.pickle.model_copy(update={"allow": ["a.b"]})})
    assert (copied.pickle.allow, plain.pickle.allow, copied.name) == (["a.b"], [], plain.name)


def test_defaults_are_built_fresh_for_each_record() -> None:
    first, second = record("PicklePolicy", {}), record("PicklePolicy", {})
    assert_record_matches(first, PicklePolicy())
    assert first.allow == [] and first.allow is not second.allow

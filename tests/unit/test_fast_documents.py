"""The fast document paths (`ckptspec._models.construct`, and the plain records of `ckptspec._plain`)
against pydantic's validation: on documents ckptspec writes and people author, and on mutations of
them, whatever a fast path builds is what validation builds, and whatever validation rejects a fast
path leaves to it (so the errors stay pydantic's)."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptspec import Manifest, Spec, load_document, parse_document, spec_digest
from ckptspec._models.construct import construct, json_form
from ckptspec._plain import json_form as record_json_form
from ckptspec._plain import record
from ckptspec.cli.documents import starter_spec

from .._fast_documents import assert_identical, assert_record_matches

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The starter spec, and manifests as ckptspec writes them beside a real torch checkpoint: with
    the starter spec embedded, and without a spec."""
    import torch

    from ckptspec.adopt import adopt

    directory = tmp_path_factory.mktemp("fast-documents")
    starter = directory / "spec.yaml"
    starter.write_text(starter_spec("demo", "torch"))
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    spec = load_document(starter)
    paths = [starter]
    for name, embedded in (("with-spec.pt", spec), ("bare.pt", None)):
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3}, directory / name)
        paths.append(adopt(directory / name, embedded, force=True))  # type: ignore[arg-type]
    return paths


def documents(written: list[Path]) -> list[dict[str, Any]]:
    return [yaml.safe_load(path.read_text()) for path in [*EXAMPLES, *written]]


def model_of(data: Any) -> type[pydantic.BaseModel]:
    kind = data.get("kind") if isinstance(data, dict) else None
    return {"spec": Spec, "manifest": Manifest}.get(kind, Manifest) if isinstance(kind, str) else Manifest


def test_documents_ckptspec_writes_take_the_fast_path(written: list[Path]) -> None:
    for data in documents(written):
        model = model_of(data)
        built = construct(model, data)
        assert built is not None, data.get("kind")
        assert_identical(built, model.model_validate(data))
        plain = record(model.__name__, copy.deepcopy(data))
        assert plain is not None, data.get("kind")
        assert_record_matches(plain, model.model_validate(data))


def test_the_spec_digest_is_the_one_of_pydantic_dump(written: list[Path]) -> None:
    manifest = load_document(written[1])
    assert isinstance(manifest, Manifest) and manifest.spec is not None and manifest.spec.document is not None
    embedded = manifest.spec.document
    assert json_form(embedded) == embedded.model_dump(mode="json")
    assert spec_digest(embedded) == manifest.spec.sha256


def test_a_document_the_fast_path_refuses_keeps_pydantic_errors() -> None:
    text = 'ckptspec: "1.1"\nkind: spec\nname: demo\npickle:\n  unknown_globals: warning\n  allow: [os.system]\n'
    assert construct(Spec, yaml.safe_load(text)) is None
    assert record("Spec", yaml.safe_load(text)) is None
    with pytest.raises(Exception) as caught:
        parse_document(text, source="spec.yaml")
    assert "spec.yaml:5:20: pickle.unknown_globals: value error, 'warning' would let globals nobody named pass" in str(caught.value)


def paths_in(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            found += paths_in(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += paths_in(value, (*prefix, index))
    return found


def at(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=5),
    st.integers(min_value=2**62, max_value=2**1100),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "error", "warning", "float32", "bogus", "required", "optional", "forbidden", "crc32c", "sha256",
                     "1.0", "1.1", "1.7", "2.0", "deadbeef", "DEADBEEF", "deadbeef\n", "/model", "/a~2", "a" * 64,
                     "0" * 64, "os.system", "myproject.Config", "restore", "tensor", "lightning", "python"]),
    st.text(max_size=4),
)  # fmt: skip
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(st.text(max_size=3), SCALARS, max_size=2))


def tweaks(value: Any) -> list[Any]:
    """Values next to `value` that a loose reading would take for it."""
    if isinstance(value, bool):
        return [int(value), str(value).lower(), None]
    if isinstance(value, int):
        return [float(value) if abs(value) < 2**1000 else 0.5, bool(value), str(value), -value - 1, value + 2**64, None]
    if isinstance(value, float):
        return [int(value) if math.isfinite(value) else 0, math.inf, math.nan, -value, str(value), True]
    if isinstance(value, str):
        return [value + "\n", "\n" + value, value.upper(), value + " ", "", value.encode(), 7, [value], None]
    if isinstance(value, list):
        return [[], [value], value * 2, tuple(value), {}, None]
    if isinstance(value, dict):
        return [{}, [value], {**value, "extra": 1}, None, "x"]
    return [0, "", [], {}]


@st.composite
def mutated(draw: st.DrawFn, seeds: list[dict[str, Any]]) -> Any:
    data = copy.deepcopy(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = paths_in(data)
        path = draw(st.sampled_from(paths))
        operation = draw(st.sampled_from(["tweak", "tweak", "replace", "graft", "delete", "add"]))
        if not path:
            continue
        parent, last = at(data, path[:-1]), path[-1]
        if operation == "tweak":
            parent[last] = draw(st.sampled_from(tweaks(parent[last])))
        elif operation == "replace":
            parent[last] = draw(VALUES)
        elif operation == "graft":  # a subtree from elsewhere in the document
            parent[last] = copy.deepcopy(at(data, draw(st.sampled_from(paths))))
        elif operation == "delete":
            del parent[last]
            if isinstance(parent, list):
                break  # the other paths drawn may now point past the end
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "requires", "allow", "tensors", "crc32c", str(last)]))] = draw(VALUES)
    return data


def plain(value: Any) -> Any:
    """JSON data compared with types (`1 == 1.0 == True` for `==`)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    return (type(value).__name__, value)


def test_mutated_documents_build_as_validation_builds_them(written: list[Path]) -> None:
    seeds = documents(written)

    @settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(mutated(seeds))
    def check(data: Any) -> None:
        model = model_of(data)
        built = construct(model, copy.deepcopy(data))
        as_record = record(model.__name__, copy.deepcopy(data))
        assert (built is None) == (as_record is None), "the model's fast path and the records judged the data apart"
        try:
            validated = model.model_validate(data)
        except pydantic.ValidationError:
            assert built is None, "the fast path accepted what validation rejects"
            return
        if built is not None:
            assert_identical(built, validated)
            assert_record_matches(as_record, validated)
        specs = [validated] if isinstance(validated, Spec) else []
        if isinstance(validated, Manifest) and validated.spec is not None and validated.spec.document is not None:
            specs.append(validated.spec.document)
        for spec in specs:
            fast = json_form(spec)
            if fast is not None:
                assert plain(fast) == plain(spec.model_dump(mode="json"))
        if isinstance(validated, Spec) and built is not None:
            assert plain(record_json_form(as_record)) == plain(validated.model_dump(mode="json"))

    check()

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptspec import YAMLSyntaxError
from ckptspec._yaml import dump_yaml, load_yaml
from ckptspec._yaml_block import BlockText, NotSimple, read_block, resolves_to_string


def test_duplicate_key_names_line_and_column() -> None:
    with pytest.raises(YAMLSyntaxError) as caught:
        load_yaml("a: 1\nb:\n  c: 2\n  c: 3\n", "doc.yaml")
    assert str(caught.value) == "doc.yaml:4:3: duplicate key 'c'"


@pytest.mark.parametrize(
    "text",
    [
        "x: !!python/object/apply:os.system ['touch pwned']\n",
        "x: !!python/name:os.system\n",
        "x: !!python/object/new:subprocess.Popen [['true']]\n",
    ],
)
def test_python_tags_are_refused_without_running(text: str, tmp_path: Path) -> None:
    with pytest.raises(YAMLSyntaxError, match="doc.yaml:1:4"):
        load_yaml(text, "doc.yaml")


def test_syntax_error_has_position() -> None:
    with pytest.raises(YAMLSyntaxError, match=r"^doc.yaml:2:1: "):
        load_yaml("a: [\n", "doc.yaml")


def test_non_utf8_is_refused() -> None:
    with pytest.raises(YAMLSyntaxError, match="doc.yaml: not UTF-8 text"):
        load_yaml(b"a: \xff\xfe\n", "doc.yaml")


def test_anchors_and_merge_keys_still_work() -> None:
    loaded = load_yaml("base: &b {x: 1}\nderived:\n  <<: *b\n  y: 2\n")
    assert loaded.data == {"base": {"x": 1}, "derived": {"x": 1, "y": 2}}


def test_dump_keeps_data_order_and_is_deterministic() -> None:
    data = {"zeta": 1, "alpha": [1, 2], "mid": {"b": None, "a": "ü"}}
    first = dump_yaml(data)
    assert first == dump_yaml(dict(data))
    assert first.index("zeta") < first.index("alpha") < first.index("mid")
    assert "ü" in first
    assert load_yaml(first).data == data


def test_dump_never_writes_aliases() -> None:
    shared = [1, 2]
    assert "&" not in dump_yaml({"a": shared, "b": shared})


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from(["yes", "no", "on", "null", "~", "1.0", "0x1f", "2026-01-01", "1_000", "<<", "=", "- a", "a: b"]),
)
simple_strings = st.from_regex(r"[A-Za-z0-9_/][A-Za-z0-9_./+-]{0,12}(:[A-Za-z0-9_./+-]{1,4})?", fullmatch=True)
"""Names, versions, digests and times: the strings written without PyYAML's emitter."""
documents = st.recursive(
    scalars | simple_strings,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.text(max_size=8) | simple_strings, documents, max_size=5))
def test_dump_then_load_round_trips_and_matches_pyyaml(data: object) -> None:
    text = dump_yaml(data)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    assert text == yaml.dump(data, Dumper=dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)
    assert load_yaml(text).data == data == yaml.safe_load(text)


simple_documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | simple_strings | st.just(""),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(simple_strings, children, max_size=4),
    max_leaves=40,
)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(simple_strings, simple_documents, max_size=6) | st.lists(simple_documents, max_size=4))
def test_documents_of_simple_strings_are_written_line_by_line_as_pyyaml_writes_them(data: object) -> None:
    text = BlockText().document(data)  # raises if the document is not taken line by line
    assert text == yaml.dump(data, Dumper=yaml.SafeDumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)
    assert yaml.safe_load(text) == data


def test_plain_scalars_resolved_by_earlier_documents_load_as_pyyaml_loads_them() -> None:
    scalars = ["1", "yes", "2026-12-01", "2026-12-01T15:13:51+00:00", "null", "~", "1e3", "0x1F", ".inf", "a" * 100, "<<x"]
    first = "\n".join(f"k{index}: {value}" for index, value in enumerate(scalars))
    second = "\n".join(f"k{index}: [{value}, '{value}', {{x: {value}}}]" for index, value in enumerate(scalars))
    for text in (first, second, first):
        assert load_yaml(text).data == yaml.safe_load(text)
    third = "a: 1\nb: yes\n"
    assert load_yaml(third).data == {"a": 1, "b": True}
    with pytest.raises(YAMLSyntaxError):
        load_yaml("a: =\n")  # the value tag the safe loader does not construct, refused however often seen
    with pytest.raises(YAMLSyntaxError):
        load_yaml("b: =\n")


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(simple_strings, simple_documents, max_size=6) | st.lists(simple_documents, max_size=4))
def test_the_block_reader_reads_what_the_block_writer_writes(data: object) -> None:
    text = BlockText().document(data)
    assert read_block(text) == yaml.safe_load(text) == data


PIECES = ["'", '"', "''", ":", ": ", " ", "  ", "#", " # c", "- ", "-", "\n", "\n  ", "\n- ", "[", "]", ", ", "{}", "[]",
          "yes", "No", "1_0", "0o7", "012", "0x1F", "1:30", "2026-01-01", "2026-01-01 10:00:00", "&a ", "*a", "!!str ",
          "|", ">", "? ", "~", "<<", "=", "null", ".inf", "-.5", "1.5e+3", "1e3", "\\n", "\t", "\r", "é", "\x07", "---", "..."]  # fmt: skip


@st.composite
def edited_texts(draw: st.DrawFn) -> str:
    """Texts near the ones ckptspec writes: a written document with a few pieces of YAML syntax put in."""
    text = BlockText().document(draw(st.dictionaries(simple_strings, simple_documents, min_size=1, max_size=4)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        at = draw(st.integers(min_value=0, max_value=len(text)))
        text = text[:at] + draw(st.sampled_from(PIECES)) + text[at + draw(st.integers(min_value=0, max_value=2)) :]
    return text


@settings(max_examples=3000, deadline=None)
@given(edited_texts())
def test_the_block_reader_reads_a_text_as_pyyaml_does_or_leaves_it_to_pyyaml(text: str) -> None:
    try:
        read = read_block(text)
    except NotSimple:
        return
    assert repr(read) == repr(yaml.safe_load(text)), text  # repr: tells 1, 1.0 and True apart, and NaN from NaN


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="0123456789abefnoxyYNTtFOlu_.:+-<=~ ", max_size=12) | st.sampled_from(PIECES))
def test_plain_scalars_are_strings_exactly_where_pyyaml_resolves_them_to_strings(plain: str) -> None:
    resolved = yaml.SafeLoader("").resolve(yaml.ScalarNode, plain, (True, False))
    assert resolves_to_string(plain) == (resolved == "tag:yaml.org,2002:str"), plain


def test_a_manifest_as_ckptspec_writes_it_is_read_without_pyyaml(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(BlockText().document({"ckptspec": "1.2", "kind": "manifest", "files": [{"path": "a.pt", "size": 3}], "unknown": ["rng"]}))
    script = f"import sys; from ckptspec._yaml import load_yaml; load_yaml(open({str(manifest)!r}).read()); print('yaml' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"

"""Reading and writing spec and manifest documents: YAML → version check → migration → models.

The validate path reads its documents with `read_spec` and `read_manifest`, as plain records where
the generated plan vouches for them (`ckptspec._plain`): it never imports pydantic or the models
unless a document needs their validation. The public readers return the models.
"""

from __future__ import annotations

import json
import stat
import typing
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar, Union

from ._storage import Location, RemotePath, location, put_whole
from ._exceptions import DocumentError, Issue, SchemaValidationError, UnsupportedVersionError, WriteError
from ._filetypes import special_file_kind
from ._migrations import MigrationRegistry, SchemaVersion, default_registry
from ._document_values import SCHEMA_VERSION
from ._plain import is_record, record
from ._plain import json_form as record_json_form
from ._atomic import atomic_write_bytes
from ._yaml import LoadedYAML, dump_yaml, load_yaml

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

    from ._models import Manifest, Spec

__all__ = [
    "Document",
    "document_bytes",
    "dump_document",
    "load_document",
    "load_manifest",
    "load_spec",
    "parse_document",
    "parse_manifest",
    "read_document_bytes",
    "read_manifest",
    "read_spec",
    "save_document",
    "spec_digest",
    "spec_digest_matches",
]

Document = Union["Spec", "Manifest"]
DocumentT = TypeVar("DocumentT", "Spec", "Manifest")

MODEL_BY_KIND = {"spec": "Spec", "manifest": "Manifest"}
"""Each document kind's model, by name."""
MAX_DOCUMENT_SIZE = 256 << 20
"""Far above the manifest of a model of a million tensors: a larger file is not read into memory."""
_FAST_DOCUMENT_SIZE = 1 << 20
"""Documents up to this size are built without pydantic's validation when they can be (see
`ckptspec._models.construct`): there, building the validator costs more than all the checks. In a
larger one (tens of thousands of tensors) pydantic's compiled checks win."""
_BOUND_ERRORS = {
    "greater_than_equal": ("ge", ">="),
    "greater_than": ("gt", ">"),
    "less_than_equal": ("le", "<="),
    "less_than": ("lt", "<"),
}
"""pydantic's error type for a broken numeric bound → the bound's key in the error's `ctx`, and its symbol."""


def load_document(path: str | Path, *, registry: MigrationRegistry = default_registry) -> Document:
    """Read a spec or a manifest, whichever `kind:` the file declares."""
    path = location(path)
    return parse_document(read_document_bytes(path), source=path, registry=registry)


def read_document_bytes(path: str | Path) -> bytes:
    """The bytes of the spec or manifest at `path`, read once; refused beyond the largest a document may be."""
    path = location(path)
    _require_regular_file(path)
    try:
        with path.open("rb") as handle:
            raw = _read_at_most(handle, MAX_DOCUMENT_SIZE + 1)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    if len(raw) > MAX_DOCUMENT_SIZE:
        raise DocumentError(f"{path}: larger than {MAX_DOCUMENT_SIZE} bytes, more than any spec or manifest; it was not read")
    return raw


def _read_at_most(handle: IO[bytes], limit: int) -> bytes:
    """Up to `limit` bytes, a block at a time: one `read(limit)` reserves all of `limit` at once,
    whatever the file holds."""
    blocks, size = [], 0
    while size < limit and (block := handle.read(min(1 << 20, limit - size))):
        blocks.append(block)
        size += len(block)
    return b"".join(blocks)


def _require_regular_file(path: Path) -> None:
    """Refuse anything but a regular file from its type alone (opening a FIFO waits for a writer
    forever), and one larger than any document before reading it."""
    try:
        status = path.stat()
    except FileNotFoundError:
        raise DocumentError(f"{path}: no such file") from None
    except OSError as exc:
        raise _unreadable(path, exc) from None
    if stat.S_ISDIR(status.st_mode):
        raise DocumentError(f"{path}: is a directory, not a YAML document")
    if not stat.S_ISREG(status.st_mode):
        raise DocumentError(f"{path}: not a regular file but {special_file_kind(status.st_mode)}; a document is a YAML file")
    if status.st_size > MAX_DOCUMENT_SIZE:
        raise DocumentError(f"{path}: {status.st_size} bytes, larger than the {MAX_DOCUMENT_SIZE} bytes of any spec or manifest; it was not read")


def _unreadable(path: Path, error: OSError) -> DocumentError:
    return DocumentError(f"{path}: cannot read: {error.strerror}")


def load_spec(path: str | Path) -> Spec:
    return _expect(load_document(path), "spec", path)


def load_manifest(path: str | Path) -> Manifest:
    return _expect(load_document(path), "manifest", path)


def parse_manifest(data: bytes, *, source: str | Location) -> Manifest:
    """The manifest in `data`, read from `source` (named in every error)."""
    return _expect(parse_document(data, source=source), "manifest", source)


def read_spec(path: str | Path) -> Spec:
    """The spec at `path` as the checks read it: a plain record when the plan vouches for it, else
    the validated model (see `ckptspec._plain`)."""
    path = location(path)
    return _expect(_read_record(read_document_bytes(path), path), "spec", path)


def read_manifest(path: str | Path) -> Manifest:
    """The manifest at `path` as the checks read it; see `read_spec`."""
    path = location(path)
    return _expect(_read_record(read_document_bytes(path), path), "manifest", path)


def _expect(document: Any, kind: str, path: str | Path) -> Any:
    if document.kind != kind:
        raise DocumentError(f"{path}: is a {document.kind}, expected a {kind}")
    return document


def parse_document(
    text: str | bytes, *, source: str | Path = "<string>", registry: MigrationRegistry = default_registry
) -> Document:
    from ._models.construct import construct

    loaded, kind, upgraded = _upgraded(text, source, registry)
    model = _model(kind)
    built = construct(model, upgraded) if len(loaded.text) <= _FAST_DOCUMENT_SIZE else None
    return built if built is not None else _validated(model, loaded, upgraded, source)  # type: ignore[return-value]


def _read_record(text: str | bytes, source: str | Path) -> Any:
    loaded, kind, upgraded = _upgraded(text, source, default_registry)
    built = record(MODEL_BY_KIND[kind], upgraded) if len(loaded.text) <= _FAST_DOCUMENT_SIZE else None
    return built if built is not None else _validated(_model(kind), loaded, upgraded, source)


def _upgraded(text: str | bytes, source: str | Path, registry: MigrationRegistry) -> tuple[LoadedYAML, str, Any]:
    """The document's YAML, its kind and its data migrated to this release's schema."""
    loaded = load_yaml(text, source)
    data = loaded.data
    if not isinstance(data, dict):
        raise SchemaValidationError(source, [_issue(loaded, (), "a document must be a mapping of keys to values")])
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in MODEL_BY_KIND:
        kinds = " or ".join(repr(k) for k in MODEL_BY_KIND)
        raise SchemaValidationError(source, [_issue(loaded, ("kind",), f"must be {kinds}, got {kind!r}")])
    version = _declared_version(loaded)
    try:
        return loaded, kind, registry.upgrade(data, version)
    except UnsupportedVersionError as exc:
        raise UnsupportedVersionError(_issue(loaded, ("ckptspec",), str(exc)).render(source)) from None


def _model(kind: str) -> type[BaseModel]:
    from . import _models

    return getattr(_models, MODEL_BY_KIND[kind])  # type: ignore[no-any-return]


def _validated(model: type[BaseModel], loaded: LoadedYAML, upgraded: Any, source: str | Path) -> BaseModel:
    import pydantic

    try:
        return model.model_validate(upgraded)
    except pydantic.ValidationError as exc:
        # Line numbers only mean something for the document as written, not for a migrated one.
        located = loaded if upgraded is loaded.data else None
        raise SchemaValidationError(source, _issues(located, model, exc)) from None


def _declared_version(loaded: LoadedYAML) -> SchemaVersion:
    declared = loaded.data.get("ckptspec")
    if declared is None:
        raise SchemaValidationError(
            loaded.source, [_issue(loaded, ("ckptspec",), f'missing: every document starts with ckptspec: "{SCHEMA_VERSION}"')]
        )
    if not isinstance(declared, str):
        hint = f'quote it: ckptspec: "{declared}"' if isinstance(declared, (int, float)) else "a string"
        raise SchemaValidationError(
            loaded.source, [_issue(loaded, ("ckptspec",), f"must be a MAJOR.MINOR string; {hint}")]
        )
    try:
        return SchemaVersion.parse(declared)
    except ValueError as exc:
        raise SchemaValidationError(loaded.source, [_issue(loaded, ("ckptspec",), str(exc))]) from None


def _issue(loaded: LoadedYAML | None, path: tuple[str | int, ...], message: str, *, key: bool = False) -> Issue:
    mark = loaded.mark_of(path, key=key) if loaded is not None else None
    line, column = mark if mark is not None else (None, None)
    return Issue(path=path, message=message, line=line, column=column)


def _issues(loaded: LoadedYAML | None, model: type[BaseModel], exc: ValidationError) -> list[Issue]:
    issues = []
    for error in exc.errors(include_url=False):
        path = _document_path(error["loc"])
        message = _message(model, path, error)
        issues.append(_issue(loaded, path, message, key=error["type"] == "extra_forbidden"))
    return issues


def _document_path(loc: tuple[Any, ...]) -> tuple[str | int, ...]:
    # pydantic adds the tag of a union member to the location (e.g. 'list[...]'); users never wrote it.
    return tuple(part for part in loc if isinstance(part, int) or "[" not in str(part))


def _message(model: type[BaseModel], path: tuple[str | int, ...], error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        import difflib  # only a misspelt key needs it

        allowed = _allowed_keys(model, path[:-1])
        suggestion = difflib.get_close_matches(str(path[-1]), allowed, n=1)
        hint = f"; did you mean {suggestion[0]!r}?" if suggestion else ""
        listed = f" (allowed: {', '.join(allowed)})" if allowed else ""
        return f"unknown key{hint}{listed}"
    if kind == "missing":
        return "required key is missing"
    if kind in _BOUND_ERRORS:
        bound, symbol = _BOUND_ERRORS[kind]
        return f"must be {symbol} {error['ctx'][bound]}, got {error['input']!r}"
    return f"{error['msg'][0].lower()}{error['msg'][1:]}, got {_short(error.get('input'))}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _allowed_keys(model: type[BaseModel], path: tuple[str | int, ...]) -> list[str]:
    """Field names of the model found at `path` inside `model`, or [] when there is none."""
    current: Any = model
    for part in path:
        current = _inner_model(current)
        if current is None:
            return []
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part)
        if field is None:
            return []
        current = field.annotation
    current = _inner_model(current)
    return list(current.model_fields) if current is not None else []


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """The model inside an annotation such as `Model`, `Model | None` or `list[Model]`."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _inner_model(argument)
        if found is not None:
            return found
    return None


def dump_document(document: Document) -> str:
    """The document as deterministic YAML: schema field order, defaults of a spec kept, Nones dropped."""
    return dump_yaml(document.model_dump(mode="json", exclude_none=True))


def save_document(document: Document, path: str | Location, *, durable: bool = True) -> None:
    """Write the document atomically: the old file, if any, stays whole until the new one is complete.

    `durable` also fsyncs it (see `ckptspec._atomic`). In an object store it is one upload of the
    finished document.
    """
    payload = document_bytes(document, path)
    if isinstance(path, RemotePath):
        put_whole(path, payload)
    else:
        atomic_write_bytes(path, payload, durable=durable)


def document_bytes(document: Document, path: str | Location) -> bytes:
    """The document as it is written to `path` (named in the error when it cannot be)."""
    try:
        return dump_document(document).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise WriteError(f"{path}: not written: {_not_unicode(exc)}") from None


def _not_unicode(error: UnicodeEncodeError) -> str:
    text = error.object if len(error.object) <= 60 else error.object[:57] + "..."
    return (
        f"{text!r} holds {error.object[error.start : error.end]!r}, which is not a Unicode character (a name read "
        "from bytes that are not UTF-8); no YAML document can hold it"
    )


def spec_digest(spec: Spec) -> str:
    """SHA-256 of the spec's canonical JSON form: the same meaning gives the same digest."""
    return _canonical_digest(_json_data(spec))


def _json_data(spec: Spec) -> dict[str, Any]:
    if is_record(spec):
        return record_json_form(spec)  # type: ignore[arg-type]
    from ._models.construct import json_form

    plain = json_form(spec)
    return plain if plain is not None else spec.model_dump(mode="json")


def _defaults(name: str) -> dict[str, Any]:
    """The JSON form of the spec named `name` that leaves every field at its default."""
    return record_json_form(record("Spec", {"name": name}))  # type: ignore[arg-type]


_ADDED_SINCE = (
    (("components", "data_position", "on_resume"), ("components", "data_position", "next_batches")),  # 1.2
    (("signature",), *(("components", name, "on_resume") for name in ("optimizer", "scheduler", "scaler", "ema"))),  # 1.1
)
"""Spec fields by the release that added them, newest first: a digest recorded by an older release
was taken without the fields added after it."""


def spec_digest_matches(spec: Spec, recorded: str) -> bool:
    """Whether `recorded` is the digest of `spec` as this release takes it, or as an older schema's
    release took it: an older spec read now gains the newer fields at their defaults, which must not
    read as an edit."""
    if spec_digest(spec) == recorded:
        return True
    document, defaults = _json_data(spec), _defaults(spec.name)
    for added in _ADDED_SINCE:
        for *parents, key in added:
            holder, default = document, defaults
            for parent in parents:
                holder, default = holder[parent], default[parent]
            if holder[key] != default[key]:
                return False
            del holder[key]
        if _canonical_digest(document) == recorded:
            return True
    return False


def _canonical_digest(document: dict[str, Any]) -> str:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    import hashlib  # OpenSSL's bindings, only when a spec is judged

    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

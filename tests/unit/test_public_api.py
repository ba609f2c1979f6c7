from __future__ import annotations

import subprocess
import sys

import ckptspec


def test_all_is_sorted_and_every_name_resolves() -> None:
    assert ckptspec.__all__ == sorted(ckptspec.__all__)
    for name in ckptspec.__all__:
        assert getattr(ckptspec, name) is not None
    assert set(ckptspec.__all__) <= set(dir(ckptspec))


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        ckptspec.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def loaded_modules(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(result.stdout.split())


def test_core_imports_without_frameworks() -> None:
    modules = loaded_modules("import ckptspec, ckptspec.cli; ckptspec.load_spec")
    assert not modules & {"torch", "tensorflow", "numpy", "keras"}


def test_reading_a_checkpoint_does_not_load_the_document_models() -> None:
    modules = loaded_modules("from ckptspec.formats.inspect import inspect_checkpoint")
    assert not modules & {"pydantic", "yaml", "torch", "numpy"}


def test_the_inspect_command_loads_neither_the_models_nor_the_validator() -> None:
    modules = loaded_modules("from ckptspec.cli import cli; cli.get_command(None, 'inspect')")
    assert not modules & {"pydantic", "yaml", "rich", "ckptspec._validate", "ckptspec.checks"}

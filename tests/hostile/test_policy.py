"""The policy is the operator's: a manifest beside an upload cannot widen it, and `allow` names exact globals."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from ckptspec import load_manifest, load_spec, manifest_path_for
from ckptspec._documents import spec_digest
from ckptspec._models import Spec
from ckptspec.adopt import AdoptionRefused, adopt
from ckptspec.cli import cli

from ._gadgets import TRUSTED_CLASS, TrainConfig, reducing
from .conftest import dangerous_named, judge

torch = pytest.importorskip("torch")

SPEC = """\
ckptspec: "1.0"
kind: spec
name: intake
components:
  config: {{require: optional}}
  optimizer: {{require: optional}}
  rng: {{require: optional}}
  data_position: {{require: optional}}
  fingerprint: {{require: optional}}
pickle:
  allow: {allow}
"""


def _spec_file(directory: Path, name: str, allow: list[str]) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(SPEC.format(allow=allow))
    return path


@pytest.fixture(scope="module")
def own_class_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A checkpoint holding the project's own config class, adopted under an operator spec trusting it."""
    directory = tmp_path_factory.mktemp("policy")
    path = directory / "model.pt"
    torch.save({"state_dict": {"w": torch.ones(2)}, "config": TrainConfig(3)}, path)
    trusting = _spec_file(directory, "trusting", [TRUSTED_CLASS])
    strict = _spec_file(directory, "strict", [])
    adopt(path, load_spec(trusting))
    return path, trusting, strict


def test_only_the_operator_can_trust_a_class(own_class_checkpoint: tuple[Path, Path, Path]) -> None:
    path, trusting, strict = own_class_checkpoint
    assert load_manifest(manifest_path_for(path)).spec.document.pickle.allow == [TRUSTED_CLASS]
    code, result = judge(path)  # the manifest's own spec allows it: not enough
    assert code == 1 and dangerous_named(result) == {TRUSTED_CLASS}
    code, result = judge(path, "--spec", str(strict))
    assert code == 1 and dangerous_named(result) == {TRUSTED_CLASS}
    code, result = judge(path, "--spec", str(trusting))
    assert code == 0 and result["passed"], result["findings"]


def test_a_manifest_narrows_but_never_widens_the_operators_allow(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    torch.save({"state_dict": {"w": torch.ones(2)}, "config": TrainConfig(1)}, path)
    trusting = _spec_file(tmp_path, "trusting", [TRUSTED_CLASS])
    adopt(path, load_spec(trusting))
    narrow = load_spec(_spec_file(tmp_path, "narrow", []))
    manifest = yaml.safe_load(manifest_path_for(path).read_text())
    manifest["spec"] = {"name": narrow.name, "sha256": spec_digest(narrow), "document": narrow.model_dump(mode="json")}
    manifest_path_for(path).write_text(yaml.safe_dump(manifest))
    code, result = judge(path, "--spec", str(trusting))
    assert code == 1 and dangerous_named(result) == {TRUSTED_CLASS}


@pytest.mark.parametrize(
    "relaxation",
    [{"allow": ["*"]}, {"unknown_globals": "allow"}, {"unknown_globals": "warning"}, {"allow": ["pydoc.pipepager"]}],
    ids=["allow-everything", "unknown-allow", "unknown-warning", "allow-a-gadget"],
)
def test_an_uploaded_manifest_that_relaxes_the_policy_does_not_pass(tmp_path: Path, relaxation: dict) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "upload.pt"
    torch.save({"state_dict": {"w": torch.ones(2)}}, path)
    adopt(path)
    torch.save({"state_dict": {"w": torch.ones(2)}, "hp": reducing("pydoc", "pipepager", "", f"touch {marker}")}, path)
    manifest = yaml.safe_load(manifest_path_for(path).read_text())
    manifest["spec"] = {"name": "mine", "sha256": "0" * 64, "document": {"ckptspec": "1.0", "kind": "spec", "name": "mine", "pickle": relaxation}}
    manifest_path_for(path).write_text(yaml.safe_dump(manifest))
    for options in ((), ("--spec", str(_spec_file(tmp_path, "operator", [])))):
        code, result = judge(path, *options)
        assert code == 1 and "pydoc.pipepager" in dangerous_named(result)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("allow", "reason"),
    [
        (["omegaconf.*"], "is a pattern"),
        (["torch.?tils.data.Dataset"], "is a pattern"),
        (["pydoc.pipepager"], "in pydoc"),
        (["logging.config.dictConfig"], "in logging"),
        (["torch.fx.graph_module._exec_with_source"], "in torch.fx"),
        (["myproject.Config.__init__.__globals__"], "internal (__dunder__) attribute"),
        (["Config"], "is not a 'module.name' global"),
    ],
)
def test_lint_refuses_an_allow_entry_that_is_not_one_reviewed_global(tmp_path: Path, allow: list[str], reason: str) -> None:
    invoked = CliRunner().invoke(cli, ["lint", str(_spec_file(tmp_path, "spec", allow))])
    assert invoked.exit_code == 1 and reason in invoked.output, invoked.output


def test_lint_refuses_a_policy_that_lets_unnamed_globals_pass(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(allow=[]) + "  unknown_globals: warning\n")
    invoked = CliRunner().invoke(cli, ["lint", str(path)])
    assert invoked.exit_code == 1 and "only 'error' is accepted" in invoked.output, invoked.output


def test_adoption_honours_the_operators_exact_allow_only(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    torch.save({"state_dict": {"w": torch.ones(2)}, "config": TrainConfig(2)}, path)
    with pytest.raises(AdoptionRefused, match=TRUSTED_CLASS):
        adopt(path)
    assert adopt(path, Spec.model_validate({"name": "operator", "pickle": {"allow": [TRUSTED_CLASS]}})).is_file()


def test_plain_values_of_real_hyper_parameters_are_on_the_allow_list(tmp_path: Path) -> None:
    import datetime
    import pathlib

    path = tmp_path / "model.pt"
    hyper_parameters = {
        "root": pathlib.Path("data"), "started": datetime.datetime(2026, 1, 2), "budget": datetime.timedelta(hours=2),
        "torch": torch.__version__,
    }  # fmt: skip
    torch.save({"state_dict": {"w": torch.ones(2)}, "hyper_parameters": hyper_parameters}, path)
    code, result = judge(path)
    assert "CKS401" not in {f["code"] for f in result["findings"]}, result["findings"]

"""Signed checkpoints: `ckptspec sign`, and the signature rules of validate and audit, on real
Lightning and TensorFlow checkpoints signed with real keys and certificates (OpenSSF model signing)."""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path

import pytest

from ckptspec import load_spec
from ckptspec.adopt import adopt

from .conftest import copy_checkpoint, run_cli

pytest.importorskip("model_signing")

from cryptography import x509  # noqa: E402 - a dependency of model signing
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402


def _write_key_pair(directory: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = directory / f"{name}.key", directory / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _certificate(subject: str, issuer: str, public_key: object, signing_key: object, *, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    usage = dict.fromkeys(
        ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement", "encipher_only", "decipher_only"), False
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.KeyUsage(digital_signature=not ca, key_cert_sign=ca, crl_sign=ca, **usage), critical=True)
    )
    if ca:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
    return builder.sign(signing_key, hashes.SHA256())  # type: ignore[arg-type]


def _write_pem(certificate: x509.Certificate, path: Path) -> Path:
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return path


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A release key pair, an attacker's key pair, and a certificate authority with a signing certificate."""
    directory = tmp_path_factory.mktemp("keys")
    paths: dict[str, Path] = {}
    paths["release.key"], paths["release.pub"] = _write_key_pair(directory, "release")
    paths["attacker.key"], paths["attacker.pub"] = _write_key_pair(directory, "attacker")
    for authority in ("ca", "other-ca"):
        key = ec.generate_private_key(ec.SECP256R1())
        root = _certificate(authority, authority, key.public_key(), key, ca=True)
        paths[f"{authority}.pem"] = _write_pem(root, directory / f"{authority}.pem")
        paths[f"{authority}.root-key"] = key  # type: ignore[assignment]
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = _certificate("release-signer", "ca", leaf_key.public_key(), paths["ca.root-key"], ca=False)
    paths["signer.pem"] = _write_pem(leaf, directory / "signer.pem")
    paths["signer.key"] = directory / "signer.key"
    paths["signer.key"].write_bytes(
        leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@pytest.fixture
def signed_lightning(lightning_checkpoint: Path, keys: dict[str, Path], tmp_path: Path) -> Path:
    checkpoint = copy_checkpoint(lightning_checkpoint, tmp_path / "run")
    code, _, err = run_cli("sign", checkpoint, "--key", keys["release.key"])
    assert code == 0, err
    return checkpoint


def _codes(*args: str | Path) -> tuple[int, list[str], str]:
    code, out, err = run_cli("validate", *args, "--format", "json")
    import json

    findings = json.loads(out)["results"][0]["findings"] if out else []
    return code, [finding["code"] for finding in findings], out + err


def test_signed_checkpoint_verifies_with_the_trusted_key(signed_lightning: Path, keys: dict[str, Path]) -> None:
    assert Path(f"{signed_lightning}.sig").is_file()
    code, codes, text = _codes(signed_lightning, "--trusted-key", keys["release.pub"], "--require-signature")
    assert code == 0, text
    assert not [code for code in codes if code.startswith("CKS25")]


def test_changed_checkpoint_bytes_are_named(signed_lightning: Path, keys: dict[str, Path]) -> None:
    data = bytearray(signed_lightning.read_bytes())
    data[-200] ^= 0xFF  # inside the zip directory: only the file digest and the signature see it
    signed_lightning.write_bytes(bytes(data))
    code, codes, text = _codes(signed_lightning, "--trusted-key", keys["release.pub"])
    assert code == 1
    assert "CKS253" in codes
    assert f"{signed_lightning.name} changed after signing" in text


def test_replaced_manifest_is_caught(signed_lightning: Path, keys: dict[str, Path]) -> None:
    manifest = Path(f"{signed_lightning}.ckptspec.yaml")
    manifest.write_text(manifest.read_text().replace("tiny-lightning", "tiny-lightning-edited"))
    code, codes, text = _codes(signed_lightning, "--trusted-key", keys["release.pub"])
    assert "CKS253" in codes and f"{manifest.name} changed after signing" in text


def test_weights_and_manifest_replaced_together_are_caught_only_by_the_signature(
    signed_lightning: Path, keys: dict[str, Path], specs: dict[str, Path]
) -> None:
    torch = pytest.importorskip("torch")
    state = torch.load(signed_lightning, weights_only=False)
    first = next(iter(state["state_dict"]))
    state["state_dict"][first] = state["state_dict"][first] + 1.0
    torch.save(state, signed_lightning)
    adopt(signed_lightning, load_spec(specs["lightning"]), force=True)  # every CRC and digest rewritten to match

    code, codes, _ = _codes(signed_lightning)
    assert "CKS207" not in codes and "CKS253" not in codes  # consistent: nothing but a signature can tell
    code, codes, text = _codes(signed_lightning, "--trusted-key", keys["release.pub"])
    assert code == 1 and "CKS253" in codes
    assert f"{signed_lightning.name} changed after signing" in text
    assert f"{signed_lightning.name}.ckptspec.yaml changed after signing" in text


def test_signature_by_an_untrusted_key(lightning_checkpoint: Path, keys: dict[str, Path], tmp_path: Path) -> None:
    checkpoint = copy_checkpoint(lightning_checkpoint, tmp_path / "run")
    assert run_cli("sign", checkpoint, "--key", keys["attacker.key"])[0] == 0
    code, codes, text = _codes(checkpoint, "--trusted-key", keys["release.pub"])
    assert code == 1 and codes.count("CKS252") == 1, text


def test_symlink_swapped_in_for_a_signed_file(signed_lightning: Path, keys: dict[str, Path], tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.ckpt"
    shutil.copy2(signed_lightning, elsewhere)
    signed_lightning.unlink()
    signed_lightning.symlink_to(elsewhere)
    code, codes, text = _codes(signed_lightning, "--trusted-key", keys["release.pub"])
    assert code == 1 and "CKS253" in codes
    assert "is a symlink, not the file that was signed" in text


def test_unsigned_checkpoint_is_an_error_only_when_required(lightning_checkpoint: Path, keys: dict[str, Path], tmp_path: Path) -> None:
    checkpoint = copy_checkpoint(lightning_checkpoint, tmp_path / "run")
    code, codes, _ = _codes(checkpoint, "--trusted-key", keys["release.pub"])
    assert "CKS250" not in codes
    code, codes, text = _codes(checkpoint, "--trusted-key", keys["release.pub"], "--require-signature")
    assert code == 1 and "CKS250" in codes, text


def test_signature_without_trusted_keys_is_not_a_pass(signed_lightning: Path) -> None:
    code, codes, text = _codes(signed_lightning)
    assert "CKS254" in codes and "was not verified" in text


def test_damaged_signature_bundle(signed_lightning: Path, keys: dict[str, Path]) -> None:
    signature = Path(f"{signed_lightning}.sig")
    signature.write_text(signature.read_text().replace('"payload":"', '"payload":"AAAA', 1))
    code, codes, text = _codes(signed_lightning, "--trusted-key", keys["release.pub"])
    assert code == 1 and "CKS251" in codes, text


def test_operator_spec_decides_who_is_trusted(
    lightning_checkpoint: Path, keys: dict[str, Path], tmp_path: Path
) -> None:
    """An uploader's manifest may embed a spec naming its own key; only the operator's spec counts."""
    checkpoint = copy_checkpoint(lightning_checkpoint, tmp_path / "upload")
    uploader_spec = tmp_path / "uploader.yaml"
    uploader_spec.write_text(
        f'ckptspec: "1.0"\nkind: spec\nname: upload\ncomponents: {{config: {{require: optional}}, rng: {{require: optional}},'
        f" fingerprint: {{require: optional}}}}\nsignature: {{require: true, trusted_keys: [{keys['attacker.pub']}]}}\n"
    )
    adopt(checkpoint, load_spec(uploader_spec), force=True)
    assert run_cli("sign", checkpoint, "--key", keys["attacker.key"])[0] == 0
    code, codes, _ = _codes(checkpoint)
    assert "CKS254" in codes  # the embedded key is not trusted: not verified, never a pass

    operator_spec = tmp_path / "policy" / "operator.yaml"
    operator_spec.parent.mkdir()
    shutil.copy2(keys["release.pub"], operator_spec.parent / "release.pub")
    operator_spec.write_text(
        'ckptspec: "1.0"\nkind: spec\nname: intake\ncomponents: {config: {require: optional}, rng: {require: optional},'
        " fingerprint: {require: optional}}\nsignature: {require: true, trusted_keys: [release.pub]}\n"
    )
    code, codes, text = _codes(checkpoint, "--spec", operator_spec)
    assert code == 1 and "CKS252" in codes, text


def test_tensorflow_bundle_signature_survives_later_saves(tf_checkpoints: dict[str, Path], keys: dict[str, Path], tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tf_checkpoints["run"], run)
    first = run / tf_checkpoints["first"].name
    assert run_cli("sign", first, "--key", keys["release.key"])[0] == 0
    (run / "checkpoint").write_text((run / "checkpoint").read_text() + "\n")  # a later save rewrites the state file
    code, codes, text = _codes(first, "--trusted-key", keys["release.pub"], "--require-signature")
    assert not [code for code in codes if code.startswith("CKS25")], text

    (data,) = run.glob(f"{first.name}.data-*")
    shutil.copy2(data, run / f"{first.name}.data-00001-of-00002")  # a shard nobody signed
    code, codes, text = _codes(first, "--trusted-key", keys["release.pub"])
    assert "CKS253" in codes and "not covered by" in text


def test_certificate_chain_signatures(lightning_checkpoint: Path, keys: dict[str, Path], tmp_path: Path) -> None:
    checkpoint = copy_checkpoint(lightning_checkpoint, tmp_path / "run")
    code, _, err = run_cli(
        "sign", checkpoint, "--key", keys["signer.key"], "--certificate", keys["signer.pem"], "--chain", keys["ca.pem"]
    )
    assert code == 0, err
    code, codes, text = _codes(checkpoint, "--trusted-certificate", keys["ca.pem"], "--require-signature")
    assert not [code for code in codes if code.startswith("CKS25")], text
    code, codes, text = _codes(checkpoint, "--trusted-certificate", keys["other-ca.pem"])
    assert code == 1 and "CKS252" in codes, text


def test_audit_verifies_every_signature(signed_lightning: Path, keys: dict[str, Path]) -> None:
    code, out, err = run_cli("audit", signed_lightning.parent, "--trusted-key", keys["attacker.pub"], "--format", "json")
    assert code == 1 and "CKS252" in out, out + err


def test_sign_refuses_what_it_cannot_sign(lightning_checkpoint: Path, keys: dict[str, Path], tmp_path: Path) -> None:
    bare = tmp_path / "bare" / lightning_checkpoint.name
    bare.parent.mkdir()
    shutil.copy2(lightning_checkpoint, bare)
    code, _, err = run_cli("sign", bare, "--key", keys["release.key"])
    assert code == 2 and "no manifest" in err and not Path(f"{bare}.sig").exists()

    checkpoint = copy_checkpoint(lightning_checkpoint, tmp_path / "run")
    code, _, err = run_cli("sign", checkpoint, "--key", keys["release.pub"])
    assert code == 2 and "cannot" in err and "Traceback" not in err
    assert not Path(f"{checkpoint}.sig").exists()


def test_tensorflow_manager_signs_every_save_with_the_key_the_environment_names(keys: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    import os
    import subprocess
    import sys

    from .conftest import HERE, TF_SPEC

    spec = tmp_path / "spec.yaml"
    spec.write_text(TF_SPEC)
    environment = {**os.environ, "CKPTSPEC_SIGNING_KEY": str(keys["release.key"])}
    command = [sys.executable, str(HERE / "_tf_adapter_training.py"), str(tmp_path / "run"), str(spec)]
    subprocess.run(command, check=True, capture_output=True, env=environment)
    signatures = sorted(path.name for path in (tmp_path / "run").glob("*.sig"))
    assert signatures == ["ckpt-1.sig", "ckpt-2.sig"]
    code, out, err = run_cli("audit", tmp_path / "run", "--trusted-key", keys["release.pub"], "--require-signature", "--format", "json")
    assert "CKS25" not in out, out + err

"""Sign a checkpoint together with its manifest, and verify such a signature, with OpenSSF model signing.

    from ckptspec.signing import sign, Trust, verify

    sign("runs/epoch=3-step=900.ckpt", private_key="release.key")      # writes epoch=3-step=900.ckpt.sig
    findings = verify("runs/epoch=3-step=900.ckpt", Trust(keys=("release.pub",)))

The signature is model signing's own bundle (a DSSE envelope holding an in-toto statement whose
resources are the SHA-256 of each file), written beside the checkpoint as `<checkpoint>.sig`. It covers
every file of the checkpoint (the file, a TensorFlow index and its data shards, or every file under a
checkpoint directory) and the manifest beside it: the manifest records the construction config, the
fingerprint digests and what the checkpoint holds, so signing it binds them to the bytes. A TensorFlow
`checkpoint` state file is not covered, since every later save rewrites it.

Which signers are trusted is the verifier's decision alone (`Trust`, from the operator's spec or the
command line): nothing inside an upload names its own trusted keys. Needs the `signing` extra.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._dataclass import dataclass
from ._storage import Location, RemotePath, location
from ._atomic import atomic_write_bytes
from ._exceptions import CkptspecError
from ._sidecars import SIGNATURE_SUFFIX, keras_program_path_for, manifest_path_for, program_path_for, signature_path_for
from .checks._registry import Finding
from .checks.signature import (
    SignatureInvalid,
    SignatureMissing,
    SignatureNotVerifiedRemote,
    SignatureUnverified,
    SignedFilesChanged,
    SignerUntrusted,
)

if TYPE_CHECKING:
    from ._models import SignaturePolicy

__all__ = [
    "SIGNATURE_SUFFIX",
    "SIGNING_KEY_VARIABLE",
    "Trust",
    "remove_sidecars",
    "sign",
    "sign_at_save",
    "signature_path_for",
    "signed_files",
    "verify",
]

SIGNING_KEY_VARIABLE = "CKPTSPEC_SIGNING_KEY"
"""Names the private key the adapters sign with when they are given no `signing_key`."""
_HASH = "sha256"
_MAX_SIGNATURE_BYTES = 16 * 1024 * 1024
_MAX_FILES = 100_000


@dataclass(frozen=True)
class Trust:
    """Who may sign: elliptic-curve public keys (PEM files) and certificate chains (PEM files) that a
    signing certificate must chain to. `required` makes an unsigned checkpoint an error."""

    keys: tuple[Path, ...] = ()
    certificates: tuple[Path, ...] = ()
    required: bool = False

    @property
    def configured(self) -> bool:
        return bool(self.keys or self.certificates)

    @classmethod
    def from_policy(cls, policy: SignaturePolicy, base: Path) -> Trust:
        """The trust an operator's spec declares; its relative paths start at `base`, the spec's directory."""
        return cls(
            keys=tuple(base / key for key in policy.trusted_keys),
            certificates=tuple(base / certificate for certificate in policy.trusted_certificates),
            required=policy.require,
        )

    def joined(self, other: Trust) -> Trust:
        """Both trusts' signers; required when either requires."""
        return Trust(self.keys + other.keys, self.certificates + other.certificates, self.required or other.required)


def signed_files(checkpoint: str | Path) -> list[Path]:
    """The files a signature of `checkpoint` covers: its own files, its manifest and the program
    exported beside it (when there is one), sorted."""
    checkpoint = Path(checkpoint)
    files = [*_checkpoint_files(checkpoint), manifest_path_for(checkpoint)]
    for program in (program_path_for(checkpoint), keras_program_path_for(checkpoint)):
        if program.exists() or program.is_symlink():
            files.append(program)
    return sorted(dict.fromkeys(files))


def _checkpoint_files(checkpoint: Path) -> Iterator[Path]:
    if checkpoint.is_dir() and not checkpoint.is_symlink():
        yield from _files_under(checkpoint)
    elif checkpoint.exists() or checkpoint.is_symlink():
        yield checkpoint
    else:  # a TensorFlow prefix: the index and the data shards named after it
        index = Path(f"{checkpoint}.index")
        if index.exists() or index.is_symlink():
            yield index
        prefix = f"{checkpoint.name}.data-"
        yield from sorted(path for path in checkpoint.parent.iterdir() if path.name.startswith(prefix))


def _files_under(directory: Path) -> Iterator[Path]:
    count = 0
    for root, dirs, names in os.walk(directory):
        dirs.sort()
        for name in sorted(names):
            count += 1
            if count > _MAX_FILES:
                raise CkptspecError(f"{directory}: more than {_MAX_FILES} files, refusing to sign or verify it")
            yield Path(root) / name


def sign(
    checkpoint: str | Path,
    *,
    private_key: str | Path,
    password: str | None = None,
    certificate: str | Path | None = None,
    certificate_chain: Iterable[str | Path] = (),
) -> Path:
    """Sign `checkpoint` and its manifest; returns the signature written beside it (atomically).

    With `certificate` the signature carries that signing certificate and `certificate_chain`;
    without, it is a bare elliptic-curve key signature. Raises `CkptspecError` for a missing manifest,
    a symlink among the files, or a key that cannot be used.
    """
    checkpoint = Path(checkpoint)
    files = signed_files(checkpoint)
    _refuse_unsignable(checkpoint, files)
    payload = _payload(_hash(checkpoint, files))
    signer = _signer(Path(private_key), password, certificate, certificate_chain)
    try:
        signature = signer.sign(payload)
    except ValueError as exc:
        raise CkptspecError(f"{private_key}: cannot sign with this key: {exc}") from None
    target = signature_path_for(checkpoint)
    atomic_write_bytes(target, signature.bundle.to_json().encode("utf-8"))
    return target


def sign_at_save(checkpoint: str | Path, signing_key: str | os.PathLike[str] | None = None) -> Path | None:
    """After an adapter's save: sign with `signing_key`, else with the key `CKPTSPEC_SIGNING_KEY`
    names; the signature written, or None when there is no key."""
    key = signing_key if signing_key is not None else os.environ.get(SIGNING_KEY_VARIABLE)
    return sign(checkpoint, private_key=key) if key else None


def remove_sidecars(checkpoint: str | Path) -> None:
    """Remove the manifest, exported program and signature of a checkpoint being replaced or deleted:
    none of them may describe a file they were not written for."""
    for path in (manifest_path_for(checkpoint), program_path_for(checkpoint), signature_path_for(checkpoint)):
        if os.path.lexists(path):
            path.unlink()


def _refuse_unsignable(checkpoint: Path, files: list[Path]) -> None:
    manifest = manifest_path_for(checkpoint)
    if not manifest.is_file():
        raise CkptspecError(f"{checkpoint}: no manifest {manifest.name} beside it; write one before signing")
    for path in files:
        if path.is_symlink():
            raise CkptspecError(f"{path}: is a symlink; a signature covers regular files only")
        if not path.is_file():
            raise CkptspecError(f"{path}: not a regular file; cannot sign {checkpoint}")


def _signer(private_key: Path, password: str | None, certificate: str | Path | None, chain: Iterable[str | Path]) -> Any:
    from model_signing._signing import sign_certificate, sign_ec_key

    chain = [Path(item) for item in chain]
    if certificate is not None and not chain:
        raise CkptspecError(f"{certificate}: a certificate signature needs the chain that leads to its root (at least one chain certificate)")
    try:
        if certificate is None:
            return sign_ec_key.Signer(private_key, password)
        return sign_certificate.Signer(private_key, Path(certificate), chain)
    except (OSError, ValueError, TypeError) as exc:
        raise CkptspecError(f"{private_key}: cannot load the signing key or certificate: {exc}") from None


def _hash(checkpoint: Path, files: list[Path]) -> Any:
    from model_signing import hashing

    config = hashing.Config().use_file_serialization(hashing_algorithm=_HASH)
    try:
        return config.hash(checkpoint.parent, files_to_hash=files)
    except (OSError, ValueError) as exc:
        raise CkptspecError(f"{checkpoint}: cannot hash its files: {exc}") from None


def _payload(manifest: Any) -> Any:
    from model_signing._signing import signing

    return signing.Payload(manifest)


# --------------------------------------------------------------------------------------------------
# Verification


def verify(checkpoint: str | Location, trust: Trust) -> list[Finding]:
    """Judge the signature beside `checkpoint` against `trust`; returns findings (none: signed by a
    trusted signer and every covered file unchanged)."""
    checkpoint = location(checkpoint)
    signature = signature_path_for(checkpoint)
    name = str(checkpoint)
    if not signature.exists() and not signature.is_symlink():
        if trust.required:
            return [SignatureMissing.finding(f"no signature {signature.name} beside the checkpoint", checkpoint=name, file=str(signature))]
        return []
    if not trust.configured:
        message = f"{signature.name} was not verified: no trusted key or certificate was given"
        return [SignatureUnverified.finding(message, checkpoint=name, file=str(signature))]
    if isinstance(checkpoint, RemotePath):
        message = f"{signature} was not verified: signatures of remote checkpoints are verified on local copies"
        return [SignatureNotVerifiedRemote.finding(message, checkpoint=name, file=str(signature))]
    problem = _unreadable_signature(signature)
    if problem is not None:
        return [SignatureInvalid.finding(problem, checkpoint=name, file=str(signature))]
    signed, failures = _verified_statement(signature, trust)
    if signed is None:
        rule = SignerUntrusted if failures and all(untrusted for _, untrusted in failures) else SignatureInvalid
        reasons = "; ".join(reason for reason, _ in failures)
        return [rule.finding(f"{signature.name}: {reasons}", checkpoint=name, file=str(signature))]
    return list(_changed_files(checkpoint, signed, signature))


def _unreadable_signature(signature: Path) -> str | None:
    if signature.is_symlink() or not signature.is_file():
        return f"{signature.name} is not a regular file"
    if signature.stat().st_size > _MAX_SIGNATURE_BYTES:
        return f"{signature.name} is larger than {_MAX_SIGNATURE_BYTES} bytes; not a signature bundle"
    return None


def _verified_statement(signature: Path, trust: Trust) -> tuple[dict[str, str] | None, list[tuple[str, bool]]]:
    """The signed file digests (relative name → hex), once a trusted verifier accepts the signature;
    else every verifier's reason and whether it was only an unknown signer."""
    from model_signing._signing import sign_sigstore_pb

    try:
        bundle = sign_sigstore_pb.Signature.read(signature)
    except Exception as exc:  # noqa: BLE001 - the bundle parser raises many kinds for damaged input
        return None, [(f"not a readable signature bundle ({type(exc).__name__}: {exc})", False)]
    failures: list[tuple[str, bool]] = []
    for label, verifier in _verifiers(trust):
        try:
            statement = verifier.verify(bundle)
        except Exception as exc:  # noqa: BLE001 - every verification failure is reported, whatever its type
            failures.append((f"{label}: {exc}", _names_another_signer(exc)))
            continue
        return {descriptor.identifier: descriptor.digest.digest_hex for descriptor in statement.resource_descriptors()}, []
    return None, failures


def _verifiers(trust: Trust) -> Iterator[tuple[str, Any]]:
    from model_signing._signing import sign_certificate, sign_ec_key

    for key in trust.keys:
        try:
            yield f"key {key}", sign_ec_key.Verifier(key)
        except (OSError, ValueError, TypeError) as exc:
            raise CkptspecError(f"{key}: cannot load the trusted public key: {exc}") from None
    if trust.certificates:
        try:
            yield "certificate chain", sign_certificate.Verifier(list(trust.certificates))
        except (OSError, ValueError, TypeError) as exc:
            raise CkptspecError(f"cannot load the trusted certificates: {exc}") from None


def _names_another_signer(exc: Exception) -> bool:
    text = str(exc).lower()
    return "key mismatch" in text or "certificate" in text and ("chain" in text or "verify" in text or "trust" in text)


def _changed_files(checkpoint: Path, signed: dict[str, str], signature: Path) -> Iterator[Finding]:
    name = str(checkpoint)
    present = signed_files(checkpoint)
    relative = {path.relative_to(checkpoint.parent).as_posix(): path for path in present}
    for identifier, path in relative.items():
        if path.is_symlink():
            yield SignedFilesChanged.finding(f"{identifier} is a symlink, not the file that was signed", checkpoint=name, file=str(path))
        elif identifier not in signed:
            yield SignedFilesChanged.finding(f"{identifier} is not covered by {signature.name} (added after signing)", checkpoint=name, file=str(path))
        elif not path.is_file():
            yield SignedFilesChanged.finding(f"{identifier} is not a regular file", checkpoint=name, file=str(path))
    for identifier in sorted(set(signed) - set(relative)):
        yield SignedFilesChanged.finding(f"{identifier} was signed but is missing", checkpoint=name, file=str(checkpoint.parent / identifier))
    hashable = [path for identifier, path in relative.items() if identifier in signed and path.is_file() and not path.is_symlink()]
    if not hashable:
        return
    actual = _hash(checkpoint, hashable)
    for descriptor in actual.resource_descriptors():
        if descriptor.digest.digest_hex != signed[descriptor.identifier]:
            yield SignedFilesChanged.finding(
                f"{descriptor.identifier} changed after signing: sha256 {descriptor.digest.digest_hex[:16]}…, "
                f"signed {signed[descriptor.identifier][:16]}…",
                checkpoint=name,
                file=str(checkpoint.parent / descriptor.identifier),
            )


"""Signature rules: a checkpoint and its manifest carry a signature by a trusted signer, and nothing
it covers changed since. The verification itself lives in `ckptspec.signing`."""

from __future__ import annotations

from ._registry import declare

__all__ = [
    "SignatureInvalid",
    "SignatureMissing",
    "SignatureNotVerifiedRemote",
    "SignatureUnverified",
    "SignedFilesChanged",
    "SignerUntrusted",
]


@declare("CKS250", "signature-missing", family="integrity", severity="error")
class SignatureMissing:
    """## What it does
    Checks that a checkpoint has a signature (`<checkpoint>.sig`) when the operator's spec sets
    `signature.require: true`.

    ## Why is this bad?
    Without a signature, a registry cannot tell whether the checkpoint and its manifest are the ones
    the training job wrote: both can be replaced together, consistently, and every digest in the
    manifest will still match.

    ## Example
    ```text
    runs/epoch=3-step=900.ckpt               # no runs/epoch=3-step=900.ckpt.sig
    ```

    ## How to fix
    Sign at save (`signing_key=` in the adapters) or afterwards with `ckptspec sign CHECKPOINT --key KEY`.
    """


@declare("CKS251", "signature-invalid", family="integrity", severity="error")
class SignatureInvalid:
    """## What it does
    Checks that the signature beside a checkpoint is a readable model-signing bundle whose
    signature verifies.

    ## Why is this bad?
    A bundle that cannot be read, or whose signature does not verify with the key it names, was
    damaged or forged: it vouches for nothing.

    ## Example
    ```text
    epoch=3-step=900.ckpt.sig: key keys/release.pub: Signature verification failed
    ```

    ## How to fix
    Sign the checkpoint again with the release key; if the checkpoint came from elsewhere, treat it
    as untrusted.
    """


@declare("CKS252", "signer-untrusted", family="integrity", severity="error")
class SignerUntrusted:
    """## What it does
    Checks that the signature was made by one of the keys or certificate chains the operator trusts
    (`signature.trusted_keys`, `signature.trusted_certificates`, `--trusted-key`).

    ## Why is this bad?
    Anyone can sign a checkpoint with a key of their own. A valid signature by an unknown signer says
    only that somebody signed it — possibly whoever replaced it.

    ## Example
    ```text
    epoch=3-step=900.ckpt.sig: key keys/release.pub: Key mismatch: the public key hash in the
    signature's verification material does not match the provided public key
    ```

    ## How to fix
    Have the checkpoint signed with a trusted key, or — if the signer is legitimate — add its public
    key to the operator's spec. A key named inside an upload is never trusted.
    """


@declare("CKS253", "signed-files-changed", family="integrity", severity="error")
class SignedFilesChanged:
    """## What it does
    Checks that every file the signature covers is unchanged since signing. The checkpoint's files and
    its manifest must be present, regular files with their signed digests, and no file of the
    checkpoint may have been added after signing.

    ## Why is this bad?
    The signature is genuine but the bytes are not the signed ones: a tensor, the manifest (with its
    recorded config and fingerprint digests), or a data shard was changed, swapped for a symlink, or
    added afterwards.

    ## Example
    ```text
    epoch=3-step=900.ckpt changed after signing: sha256 4f2a9c…, signed 0b7e13…
    ```

    ## How to fix
    Restore the signed files from the source, or — if the change was intended — write the manifest
    and sign again.
    """


@declare("CKS254", "signature-unverified", family="integrity", severity="warning")
class SignatureUnverified:
    """## What it does
    Reports a signature beside a checkpoint that was not verified because no trusted key or
    certificate was given.

    ## Why is this bad?
    A signature is only as good as the verifier's list of trusted signers; an unchecked one proves
    nothing, and must not be read as a pass.

    ## Example
    ```text
    epoch=3-step=900.ckpt.sig was not verified: no trusted key or certificate was given
    ```

    ## How to fix
    Pass `--trusted-key PUBLIC.pem` or set `signature.trusted_keys` in the operator's spec.
    """


@declare("CKS018", "signature-not-verified-remote", family="input", severity="error")
class SignatureNotVerifiedRemote:
    """## What it does
    Reports a signature beside a remote checkpoint that was not verified although trusted signers were given.

    OpenSSF model signing hashes files on a local disk, and ckptspec does not copy a remote
    checkpoint (`s3://`, `gs://`, ...) to verify it.

    ## Why is this bad?
    The operator asked for signatures to be checked. A check that did not happen must not read as a
    pass: the checkpoint and its manifest could have been replaced together in the store.

    ## Example
    ```text
    s3://models/run-7/epoch=3-step=900.ckpt.sig was not verified: signatures of remote checkpoints are verified on local copies
    ```

    ## How to fix
    Copy the checkpoint with its manifest and signature to a local directory (`aws s3 cp --recursive`,
    `gsutil cp`) and run `ckptspec validate --trusted-key KEY` there.
    """

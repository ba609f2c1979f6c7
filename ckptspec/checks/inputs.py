"""The checks' own preconditions: a readable checkpoint, a usable manifest and spec, a spec for the
checkpoint's framework.

A check that cannot run because one of these is missing reports it here, so that nothing is ever
skipped silently.
"""

from __future__ import annotations

from ._registry import declare

__all__ = [
    "InternalCheckError",
    "CheckpointUnreadable",
    "CouldNotCheck",
    "FrameworkMismatch",
    "ManifestCheckpointMismatch",
    "ManifestInvalid",
    "ManifestMissing",
    "SpecDiffers",
    "SpecDigestMismatch",
    "SpecMissing",
]


@declare("CKS001", "checkpoint-unreadable", family="input", severity="error")
class CheckpointUnreadable:
    """## What it does
    Reports a checkpoint that the format readers cannot read: truncated archives, a zip directory
    that does not parse, a pickle that does not decode, a TensorFlow index whose blocks fail their
    checksums. Every check that needs the file's contents is then reported as not run.

    ## Why is this bad?
    What ckptspec cannot read, torch and TensorFlow cannot restore either, or restore differently.

    ## Example
    `epoch=3.ckpt: truncated: the zip central directory is missing`.

    ## How to fix
    Restore the file from a good copy; the integrity findings of the same run (size, digest) tell
    whether it was damaged after its manifest was written.
    """


@declare("CKS002", "manifest-missing", family="input", severity="error")
class ManifestMissing:
    """## What it does
    Reports a checkpoint without a manifest (`<checkpoint>.ckptspec.yaml`) beside it.

    ## Why is this bad?
    Without a manifest, completeness, tensor integrity and consistency against the recorded run
    cannot be checked; only what the files say about themselves can.

    ## Example
    `epoch=3-step=900.ckpt` without `epoch=3-step=900.ckpt.ckptspec.yaml`.

    ## How to fix
    Save through a ckptspec adapter, or adopt the checkpoint: `ckptspec manifest PATH --spec SPEC`.
    """


@declare("CKS003", "manifest-invalid", family="input", severity="error")
class ManifestInvalid:
    """## What it does
    Reports a manifest that is not valid YAML or does not follow the manifest schema.

    ## Why is this bad?
    Nothing it records can be trusted or checked.

    ## Example
    `last.ckpt.ckptspec.yaml:12:5: components.model.tensors[0].shape: input should be a valid list`.

    ## How to fix
    Do not edit manifests by hand; write them again with the adapter or `ckptspec manifest`.
    """


@declare("CKS004", "spec-missing", family="input", severity="warning")
class SpecMissing:
    """## What it does
    Reports a validation that has no spec: none given with `--spec` and none embedded in the
    manifest. The checkpoint is then judged by what its manifest records (every file and tensor it
    lists must be present and intact), not by a declared policy. A warning; an error with
    `--require-spec`.

    ## Why is this bad?
    The spec says what a complete checkpoint is. A manifest written without one records whatever
    the run saved, so a checkpoint that never had its optimizer or RNG state passes.

    ## Example
    `ckptspec validate last.ckpt` on a manifest written by `CkptspecCallback()` with no spec, or
    adopted without `--spec`.

    ## How to fix
    Pass `--spec spec.yaml`, or write manifests against a spec so they embed it. Intake and CI that
    must judge completeness pass `--require-spec`.
    """


@declare("CKS005", "spec-digest-mismatch", family="input", severity="error")
class SpecDigestMismatch:
    """## What it does
    Checks that the spec embedded in the manifest still has the digest recorded beside it.

    ## Why is this bad?
    A different digest means the embedded spec was edited after the manifest was written, e.g. to
    relax a requirement the checkpoint does not meet.

    ## Example
    ```yaml
    spec:
      name: resnet
      sha256: 5e88…        # digest of the spec as written
      document: {…}        # edited since: now hashes to 0b1f…
    ```

    ## How to fix
    Validate against the project's spec file with `--spec`, and write the manifest again.
    """


@declare("CKS006", "spec-differs", family="input", severity="warning")
class SpecDiffers:
    """## What it does
    Reports that the spec given with `--spec` is not the one the manifest was written against.

    ## Why is this bad?
    Not wrong in itself (specs evolve), but the checkpoint was saved under other rules; findings may
    come from the rules that changed.

    ## Example
    `--spec spec.yaml` (sha256 0b1f…) for a manifest recording spec sha256 5e88….

    ## How to fix
    Nothing, if the new spec is meant to apply; otherwise validate with the spec the manifest names.
    """


@declare("CKS007", "manifest-checkpoint-mismatch", family="input", severity="error")
class ManifestCheckpointMismatch:
    """## What it does
    Checks that the manifest describes the checkpoint beside it: its `checkpoint:` names that file
    (or TensorFlow prefix) and its `format:` is the file's format.

    ## Why is this bad?
    A manifest copied or renamed along with another checkpoint describes a different save; every
    other finding would compare the wrong things.

    ## Example
    `last.ckpt.ckptspec.yaml` with `checkpoint: epoch=3-step=900.ckpt`.

    ## How to fix
    Keep each manifest beside its own checkpoint; rename both together.
    """


@declare("CKS009", "internal-check-error", family="input", severity="error")
class InternalCheckError:
    """## What it does
    Reports a check that failed with an unexpected error, so that its family counts as not run
    instead of passing.

    ## Why is this bad?
    A check that did not run has not shown anything; treating it as a pass would let a damaged
    checkpoint through.

    ## Example
    `check consistency crashed: KeyError: 'param_groups'`.

    ## How to fix
    Report it as a bug in ckptspec, with the checkpoint's `ckptspec inspect --format json` output.
    """


@declare("CKS010", "could-not-check", family="input", severity="error")
class CouldNotCheck:
    """## What it does
    Reports a check that could not look at the part of the checkpoint it checks. That part cannot be
    read: a file without read permission, tensor bytes past the end of a truncated data shard, a
    TensorFlow object graph that does not decode (without it, which variables belong to the
    optimizer is unknown). The message names the rule that was not checked and why.

    ## Why is this bad?
    A check that did not look has shown nothing. Reporting "no optimizer state" because a damaged
    object graph hid it would be a false finding; saying nothing would be a false pass.

    ## Example
    `CKS106 optimizer-state-absent not checked: the object graph (_CHECKPOINTABLE_OBJECT_GRAPH) cannot
    be read, so which variables belong to the optimizer is unknown`.

    ## How to fix
    Repair what could not be read (the same run reports it, e.g. `CKS211 checkpoint-corrupt`), or
    grant read permission, and validate again.
    """


@declare("CKS017", "framework-mismatch", family="input", severity="error")
class FrameworkMismatch:
    """## What it does
    Checks that the checkpoint is of the framework the spec declares with `framework:`.

    A Lightning checkpoint under a `framework: torch` spec, or a TensorFlow bundle under a PyTorch
    spec, is a finding.

    ## Why is this bad?
    The spec's components and rules were written for another framework's files, so completeness
    is judged against the wrong expectations.

    ## Example
    `framework: torch` for `epoch=3-step=900.ckpt`, which Lightning's `Trainer` wrote.

    ## How to fix
    Validate with the spec written for the checkpoint's framework.
    """

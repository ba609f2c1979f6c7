"""What an interrupted save leaves beside a checkpoint (see `ckptspec._commit`): a pending record
that validation reads in place of the manifest when it is the one that describes the bytes, and
temporary files, staging directories and lock files that `audit` lists instead of judging.
"""

from __future__ import annotations

from ._registry import declare

__all__ = ["SaveInterrupted", "SaveLeftover"]


@declare("CKS022", "save-leftover", family="input", severity="info")
class SaveLeftover:
    """## What it does
    Lists a file an interrupted ckptspec save left, instead of judging it as a checkpoint.

    Such are a temporary file or staging directory `.NAME.<12 hex digits>.tmp` (the new bytes,
    never swapped into place), a lock file `.NAME.ckptspec.lock`, a pending record
    `NAME.ckptspec.pending.yaml` whose checkpoint is not there, TensorFlow's staging directory
    `PREFIX_temp/` of a bundle it never merged, and the files of a TensorFlow bundle that the state
    file `checkpoint` beside it no longer lists and that has no manifest (a restore never reads it).

    ## Why is this bad?
    It is not: the checkpoint beside it is whole (the previous one or the new one) and is judged on
    its own. The leftover only takes space until the next save of `NAME` removes it.

    ## Example
    `run/.last.ckpt.3f9a0c41b2de.tmp: a temporary file of an interrupted save of last.ckpt`.

    ## How to fix
    Nothing to fix: the next save of the checkpoint removes it. To reclaim the space now, delete it
    once no save of that checkpoint is running.
    """


@declare("CKS023", "save-interrupted", family="input", severity="warning")
class SaveInterrupted:
    """## What it does
    Reports a checkpoint beside which an interrupted save left its pending record, or a Hugging
    Face Trainer checkpoint whose save with ckptspec's callback stopped before its manifest.

    The record (`NAME.ckptspec.pending.yaml`) is left when the save was killed, or failed, between
    writing its new manifest and completing it. Validation reads whichever of the manifest and the record describes the
    bytes at `NAME` (their sizes and recorded digests), and says which; restores do the same.
    The Trainer writes `checkpoint-N/` itself, `trainer_state.json` last, and the callback writes
    the manifest after it: a `checkpoint-N/` whose `trainer_state.json` holds the callback's record
    but which has no manifest was complete when its save stopped. Its files are judged without one,
    and the callback writes it at the next `train()` in that output directory.

    ## Why is this bad?
    The checkpoint is whole, but it may be the previous one rather than the one the run last tried
    to save: training that resumes from it repeats the steps since that earlier save.

    ## Example
    `model.pt: a save of it was interrupted after the new file took its place: model.pt.ckptspec.pending.yaml,
    which describes it, is its manifest until the next save completes it`.

    ## How to fix
    Save again (the next save settles the record first), or resume and let training save on.
    For a Trainer checkpoint, train again in the output directory with the callback.
    """

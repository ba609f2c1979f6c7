"""`ckptspec sign`: sign a checkpoint and its manifest with OpenSSF model signing."""

from __future__ import annotations

from pathlib import Path

import click

from ._group import INPUT_PATH

__all__ = ["COMMANDS"]


@click.command("sign")
@click.argument("path", type=INPUT_PATH)
@click.option(
    "--key",
    "private_key",
    type=INPUT_PATH,
    required=True,
    envvar="CKPTSPEC_SIGNING_KEY",
    show_envvar=True,
    help="The elliptic-curve private key (PEM) to sign with.",
)
@click.option(
    "--password-env",
    metavar="VAR",
    help="The environment variable holding the private key's password, if it is encrypted.",
)
@click.option("--certificate", type=INPUT_PATH, help="Sign with this signing certificate (PEM) for the key, instead of a bare key.")
@click.option("--chain", "certificate_chain", type=INPUT_PATH, multiple=True, help="Certificates (PEM) that lead from --certificate to a root; repeatable.")
def sign_command(
    path: Path, private_key: Path, password_env: str | None, certificate: Path | None, certificate_chain: tuple[Path, ...]
) -> None:
    """Sign the checkpoint at PATH (file, TensorFlow prefix or checkpoint directory) together with its
    manifest; writes `PATH.sig`, a model-signing bundle, beside it.

    `validate` and `audit` verify it with `--trusted-key` or the operator spec's `signature:`.
    Needs the `signing` extra.
    """
    import os

    from ..signing import sign

    password = os.environ.get(password_env) if password_env else None
    if password_env and password is None:
        raise click.BadParameter(f"the environment variable {password_env} is not set", param_hint="--password-env")
    written = sign(path, private_key=private_key, password=password, certificate=certificate, certificate_chain=certificate_chain)
    click.echo(f"wrote {written}", err=True)


COMMANDS = (sign_command,)

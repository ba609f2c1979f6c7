"""Exit codes shared by every command and by `Result.exit_code`."""

__all__ = ["EXIT_CLEAN", "EXIT_FINDINGS", "EXIT_UNUSABLE"]

EXIT_CLEAN = 0
"""Nothing at error level was found."""
EXIT_FINDINGS = 1
"""At least one error-level finding (or an invalid document)."""
EXIT_UNUSABLE = 2
"""The command could not run: bad usage, or input that is not what it expects."""

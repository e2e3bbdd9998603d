"""User-facing errors: one line that says what is wrong and what to do."""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1  # the tool could not do its job (privileges, kernel, device, file)
EXIT_USAGE = 2  # bad arguments (argparse uses 2 too)


class IoscopeError(Exception):
    """An error the user can act on. str() is the whole one-line message."""

    exit_code = EXIT_ERROR

    def __init__(self, what: str, hint: str | None = None) -> None:
        self.what = what
        self.hint = hint
        super().__init__(f"{what}; {hint}" if hint else what)


class UsageError(IoscopeError):
    exit_code = EXIT_USAGE

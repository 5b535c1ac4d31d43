"""The one exception engines raise for input the caller must change."""


class UsageError(ValueError):
    """Bad input: the message says what happened and what to change.

    The server turns it into an MCP ToolError (isError with this message) and the CLI
    into exit code 2.
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        self.hint = hint
        super().__init__(f"{message} Hint: {hint}" if hint else message)

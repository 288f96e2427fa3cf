"""Errors a user can cause. The command line prints their message alone, without a traceback."""


class UserError(Exception):
    """Bad input from the user: a path, a file's content, a config key or value, a name.

    The message names the file and line (or the key) and says what was expected.
    """


class DataFormatError(UserError):
    """A data file that cannot be read as LETOR/SVMlight text."""

    def __init__(self, path: object, line: int | None, problem: str) -> None:
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.line = line
        self.problem = problem

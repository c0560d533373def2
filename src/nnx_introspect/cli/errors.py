"""The command line's errors: a handler's usage error; any exception in one line."""


class UsageError(Exception):
    """A bad argument found by a handler; the message starts with the flag."""


def _describe(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"unexpected SystemExit({error.code!r})"
    try:
        text = " ".join(str(error).split())
    except Exception:  # an exception whose __str__ fails
        text = "<unprintable>"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__

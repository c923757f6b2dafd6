"""The one exception type that means "the user asked for something we cannot do".

The command line turns a `UserError` into a single line on stderr and a non-zero exit, with no
traceback: bad configurations, missing files, corrupt checkpoints and impossible budgets are the
user's to fix, and a stack trace would only hide the message. Anything else is a bug and keeps its
traceback.
"""


class UserError(ValueError):
    """A problem with the user's input (configuration, data, checkpoint, command line)."""

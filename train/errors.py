"""The one exception type that means "the user's input is wrong".

The CLI turns it into a short message and exit status 2, never a traceback.
"""


class UserError(Exception):
    """A mistake the user can fix: the message names the bad value and what would be valid."""


EXIT_USER_ERROR = 2

"""The one exception type that means "the user's input is wrong", and every exit status the package uses.

The CLI turns a `UserError` into a short message and exit status 2, never a traceback. The
statuses live here, once: jobs/train.sbatch reads 3 ("checkpointed, requeue me") and 4.
"""


class UserError(Exception):
    """A mistake the user can fix: the message names the bad value and what would be valid."""


EXIT_OK = 0
EXIT_FAILED = 1  # a check failed (doctor), or this rank or another one failed (fit); also an unexpected error
EXIT_USER_ERROR = 2  # bad input: one clear message, no traceback
EXIT_REQUEUE = 3  # checkpointed after a stop signal: requeue the job (jobs/train.sbatch does)
EXIT_STOPPED = 4  # checkpointed after a stop signal, but trainer.max_restarts is used up: do not requeue
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT

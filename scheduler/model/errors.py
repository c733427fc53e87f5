"""Errors a user can cause. Each carries one plain sentence; the CLI prints it and exits 2."""


class SchedError(Exception):
    """Base for every error the scheduler reports to a user."""

    exit_code = 2


class SpecError(SchedError, ValueError):
    """A node or job spec, quantity or constraint that cannot be accepted."""


class NotFound(SchedError, LookupError):
    """A node, job or task named by the user does not exist."""


class RedisUnavailable(SchedError):
    """No Redis server could be reached or started."""

    exit_code = 1


class PermissionDenied(SchedError):
    """Redis refused the user a command, key or channel (its ACL user's role does not allow it)."""

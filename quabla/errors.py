"""The error classes of Quabla (spec 003 §3.10).

Each class also derives from the builtin exception that older code raised, so existing
``except ValueError`` / ``except TypeError`` handlers keep working.
"""

__all__ = [
    "QuablaError",
    "TracerError",
    "UnsupportedOperationError",
    "RetraceLimitError",
    "RetraceWarning",
    "PrecisionWarning",
]


class QuablaError(Exception):
    """Base of the Quabla-specific errors."""


class TracerError(QuablaError, TypeError):
    """A traced value was used where a concrete one is needed."""


class UnsupportedOperationError(QuablaError, ValueError, NotImplementedError):
    """A back end or transform does not support an operation; ``.op`` and ``.device`` say which."""

    def __init__(self, message=None, *, op=None, device=None):
        self.op = op
        self.device = device
        if message is None:
            where = f" on device {device!r}" if device is not None else ""
            message = f"operation {op!r} is not supported{where}"
        super().__init__(message)


class RetraceLimitError(QuablaError, ValueError):
    """Kept for existing handlers; trace caches now evict with a RetraceWarning instead."""


class RetraceWarning(UserWarning):
    """A trace was evicted from a transform's cache."""


class PrecisionWarning(UserWarning, RuntimeWarning):
    """A float64 program runs in float32 on a device (spec Q6: once per function)."""


CONTROL_FLOW_MESSAGE = (
    "TraceTensor cannot drive Python control flow; use quabla.where for elementwise "
    "selection or an explicit control-flow primitive"
)

# Tracebacks name the classes as users import them: quabla.TracerError, not quabla.errors....
for _cls in (QuablaError, TracerError, UnsupportedOperationError, RetraceLimitError, RetraceWarning,
             PrecisionWarning):
    _cls.__module__ = "quabla"
del _cls

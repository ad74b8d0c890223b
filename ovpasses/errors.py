"""Exceptions raised by ovpasses. Every message names what went wrong and what to do about it."""


class OvpassesError(Exception):
    """Base class of every error ovpasses raises on purpose."""


class UnsupportedModelError(OvpassesError):
    """The model holds a construct a pass cannot handle (for example a cache read inside a Loop body)."""


class PassInvariantError(OvpassesError):
    """A pass found the graph in a state its pattern guaranteed could not happen."""


class DeviceNotAvailableError(OvpassesError):
    """The requested OpenVINO device is not present on this machine."""


class UnsupportedRuntimeError(OvpassesError):
    """The runtime named (or installed) is not an OpenVINO release ovpasses prepares IRs for."""


class UnreadableOperationError(OvpassesError):
    """The model holds an operation that the target runtime cannot read from an IR file, and no pass can
    replace it by operations the target reads (see :mod:`ovpasses.features.old_runtimes.analysis`). ``target``, ``refused``
    (:class:`~ovpasses.features.old_runtimes.plan.OpVersionAction`) and ``path`` (the IR file, when one is known) are the facts the
    message says, for an application to say them its own way."""

    def __init__(self, message: str, *, target=None, refused=(), path=None):
        super().__init__(message)
        self.target, self.refused, self.path = target, list(refused), path


class InvalidOptionError(OvpassesError):
    """An option of the rewrite (:class:`~ovpasses.options.RewriteOptions`) has a value it does not take; the
    message names the option and the values it takes."""


class UnknownPassError(InvalidOptionError):
    """``passes`` names a pass the pipeline does not have, or is not a pass name or a list of them."""

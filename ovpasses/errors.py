"""Exceptions raised by ovpasses. Every message names what went wrong and what to do about it.

Each class carries an :class:`ErrorCode`, the kind of failure as data: ``ovpass --format json`` writes it
in its error object (schema ``ovpass.error/1``), so that a script tells a damaged input from a refused
output without reading the sentence.
"""

from enum import Enum


class ErrorCode(str, Enum):
    """What kind of failure an error is (the ``code`` of ``ovpass``'s JSON error object)."""

    USAGE = "usage"                                  # an argument or option value that is not taken
    INPUT = "input"                                  # the input IR or folder is missing, damaged or not an export
    OUTPUT = "output"                                # the output cannot be written where it was asked to go
    UNSUPPORTED_MODEL = "unsupported_model"          # the model holds what a pass cannot handle
    UNREADABLE_OPERATION = "unreadable_operation"    # the target runtime could not read the rewritten IR
    UNSUPPORTED_RUNTIME = "unsupported_runtime"      # the runtime named is not one ovpasses prepares IRs for
    DEVICE = "device"                                # the device named is not present
    PASS_INVARIANT = "pass_invariant"                # a pass found what its pattern ruled out: a defect of ours
    INTERRUPTED = "interrupted"                      # a signal stopped the run (the CLI's, not an exception's)
    INTERNAL = "internal"                            # an unexpected failure (the CLI's, not an exception's)


class OvpassesError(Exception):
    """Base class of every error ovpasses raises on purpose (its ``code``: an argument not taken)."""

    code = ErrorCode.USAGE


class InputError(OvpassesError):
    """The input (an IR file, an export folder, a file in it) is missing, damaged or cannot be used."""

    code = ErrorCode.INPUT


class OutputError(OvpassesError):
    """The result cannot be written where it was asked to go."""

    code = ErrorCode.OUTPUT


class UnsupportedModelError(OvpassesError):
    """The model holds a construct a pass cannot handle (for example a cache read inside a Loop body)."""

    code = ErrorCode.UNSUPPORTED_MODEL


class PassInvariantError(OvpassesError):
    """A pass found the graph in a state its pattern guaranteed could not happen."""

    code = ErrorCode.PASS_INVARIANT


class DeviceNotAvailableError(OvpassesError):
    """The requested OpenVINO device is not present on this machine."""

    code = ErrorCode.DEVICE


class UnsupportedRuntimeError(OvpassesError):
    """The runtime named (or installed) is not an OpenVINO release ovpasses prepares IRs for."""

    code = ErrorCode.UNSUPPORTED_RUNTIME


class UnreadableOperationError(OvpassesError):
    """The model holds an operation that the target runtime cannot read from an IR file, and no pass can
    replace it by operations the target reads (see :mod:`ovpasses.features.old_runtimes.analysis`). ``target``, ``refused``
    (:class:`~ovpasses.features.old_runtimes.plan.OpVersionAction`) and ``path`` (the IR file, when one is known) are the facts the
    message says, for an application to say them its own way."""

    code = ErrorCode.UNREADABLE_OPERATION

    def __init__(self, message: str, *, target=None, refused=(), path=None):
        super().__init__(message)
        self.target, self.refused, self.path = target, list(refused), path


class InvalidOptionError(OvpassesError):
    """An option of the rewrite (:class:`~ovpasses.options.RewriteOptions`) has a value it does not take; the
    message names the option and the values it takes (its ``code``: an argument not taken). Where one option's
    value needs another's, ``choice`` and ``needs`` (:class:`~ovpasses.modes.OptionChoice`) and ``given`` (the
    value the other option has) are the facts the message says, for an application to say them in its own
    words (the CLI in its flags)."""

    def __init__(self, message: str, *, choice=None, needs=None, given=None):
        super().__init__(message)
        self.choice, self.needs, self.given = choice, needs, given


class UnknownPassError(InvalidOptionError):
    """``passes`` names a pass the pipeline does not have, or is not a pass name or a list of them."""

"""Device names as OpenVINO spells them, checked against the devices this machine has.

OpenVINO's device names are case-sensitive (``compile_model(model, "cpu")`` fails with a multi-line
"Device with 'cpu' name is not registered"); :func:`resolve_device` accepts any case in the family part
and gives the name OpenVINO knows, or raises :class:`DeviceNotAvailableError` naming what it sees.
"""

from __future__ import annotations

import openvino as ov

from ovpasses.errors import DeviceNotAvailableError

# what the GPU plugin needs, for the message when it is asked for and absent
GPU_HINT = "The GPU plugin needs an Intel GPU and its driver"


def normalize_device(device: str) -> str:
    """The family part upper-cased, an index kept: ``"cpu"`` -> ``"CPU"``, ``"gpu.0"`` -> ``"GPU.0"``."""
    if not isinstance(device, str) or not device.strip():
        raise DeviceNotAvailableError(f"a device is named by a string such as 'CPU' or 'GPU.0', not {device!r}")
    family, dot, index = device.strip().partition(".")
    return family.upper() + dot + index


def resolve_device(device: str, core: ov.Core) -> str:
    """``device`` normalised (:func:`normalize_device`) if OpenVINO sees it on this machine: listed as it
    is in ``core.available_devices``, or a family whose devices are listed by index (``GPU`` for
    ``GPU.0, GPU.1``). An index OpenVINO does not list is refused (the CPU plugin takes none: ``CPU.0``
    fails to compile). Raises :class:`DeviceNotAvailableError` naming the devices OpenVINO sees.
    """
    name = normalize_device(device)
    available = list(core.available_devices)
    family, _, index = name.partition(".")
    if name in available or not index and any(d.split(".")[0] == family for d in available):
        return name
    hint = f". {GPU_HINT}" if family == "GPU" else ""
    raise DeviceNotAvailableError(f"device '{device}' is not available here; OpenVINO sees: "
                                  f"{', '.join(available) or 'no devices'}{hint}")

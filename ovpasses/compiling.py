"""``compile_model``: rewrite a clone of a model for the installed runtime and compile it, as OpenVINO's own
``compile_model`` takes a model or a path."""

from __future__ import annotations

import os

import openvino as ov

from ovpasses.devices import normalize_device, resolve_device
from ovpasses.errors import OvpassesError
from ovpasses.options import RewriteOptions
from ovpasses.options import options_from
from ovpasses.pipeline import rewrite


def compile_model(model: ov.Model | str | os.PathLike, device: str = "CPU", config: dict | None = None,
                  runtime: str | None = None, core: ov.Core | None = None, kv_sharing: str | None = None,
                  sliding_window: str | None = None, sliding_window_margin: int | None = None,
                  paged_heads: str | None = None, first_prompt: str | None = None, *,
                  options: RewriteOptions | None = None) -> ov.CompiledModel:
    """Rewrite a clone of ``model`` with ``options`` (or the keywords that are its fields, as :func:`rewrite`
    takes them) and compile it on ``device`` (CPU or GPU).

    ``model`` is an ``ov.Model`` or, as for OpenVINO's own ``compile_model``, the path of a model file
    (read with ``core.read_model``; the ``ovpass`` application reads IRs through its file layer, which
    also checks the pair and waits for an ``ovpass`` writer's lock). ``device`` is any case in its family part (``"cpu"``,
    ``"gpu.0"``); one that OpenVINO does not see here raises :class:`DeviceNotAvailableError`.
    """
    options = options_from(options, runtime=runtime, kv_sharing=kv_sharing, sliding_window=sliding_window,
                           sliding_window_margin=sliding_window_margin, paged_heads=paged_heads,
                           first_prompt=first_prompt)
    core = core or ov.Core()
    name = normalize_device(device)
    if name.split(".")[0] not in ("CPU", "GPU"):
        raise OvpassesError(f"compile_model supports the CPU and GPU plugins, not '{device}'")
    name = resolve_device(device, core)
    if isinstance(model, (str, os.PathLike)):
        clone = core.read_model(os.fspath(model))
    elif isinstance(model, ov.Model):
        clone = model.clone()
    else:
        raise OvpassesError(f"compile_model takes an openvino.Model or the path of an IR .xml file, not "
                            f"{type(model).__name__}")
    rewrite(clone, options=options)
    return core.compile_model(clone, name, config or {})

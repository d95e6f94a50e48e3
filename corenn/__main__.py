"""``python -m corenn``: what is installed, for users and bug reports.

Commands::

    python -m corenn plugins [--json]   # every plugin: status, distribution, hooks, devices, kernels, paths
    python -m corenn info [--json]      # versions, BLAS, devices and each plugin's own lines
    python -m corenn hooks              # the hooks a plugin can implement (corenn/hookspecs.py)
    python -m corenn kernels [--markdown]  # every op's kernel signature (--markdown: docs/kernels.md)
    python -m corenn --version

Example::

    $ python -m corenn plugins
    corenn 0.1.0: 2 plugins (2 built-in)
    corenn.backends.cpu  corenn 0.1.0  active (built-in)
    ...
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import sys
import textwrap

__all__ = ["main"]

_ENV_SWITCHES = ("CORENN_DISABLE_PLUGIN_AUTOLOAD", "CORENN_PLUGINS", "CORENN_STRICT_PLUGINS", "CORENN_TRACE_PLUGINS",
                 "CORENN_CHECK_KERNELS")
_KERNELS_SHOWN = 8  # a plugin's kernels listed one by one up to this many; more are summarised


def _status_text(record) -> str:
    text = record.status
    if record.builtin:
        text += " (built-in)"
    if record.reason:
        text += f": {record.reason}"
    return text


def _kernel_lines(kernels: list[dict]) -> list[str]:
    if not kernels:
        return []
    if len(kernels) > _KERNELS_SHOWN:
        devices = sorted({k["device_type"] for k in kernels})
        priorities = sorted({k["priority"] for k in kernels})
        overriding = sum(1 for k in kernels if k["overrides"])
        lines = [f"  kernels: {len(kernels)} (devices {', '.join(devices)}; priority "
                 f"{', '.join(map(str, priorities))}; {overriding} override other plugins)"]
        if overriding:  # which ops a plugin replaces is what its users ask first: name them even here
            names = sorted({k["op"] for k in kernels if k["overrides"]})
            lines.extend(textwrap.wrap("overriding: " + ", ".join(names), width=100, initial_indent="    ",
                                       subsequent_indent="      "))
    else:
        lines = ["  kernels:"]
        for k in kernels:
            over = f", overrides {', '.join(k['overrides'])}" if k["overrides"] else ""
            lines.append(f"    {k['op']} on {k['device_type']} (priority {k['priority']}{over})")
    shadowed = [f"{k['op']} ({k['shadowed_by']})" for k in kernels if k.get("shadowed_by")]
    if shadowed:  # registered but not what runs: say so, or the listing would claim kernels that never run
        lines.extend(textwrap.wrap("not running, another kernel wins: " + ", ".join(shadowed), width=100,
                                   initial_indent="    ", subsequent_indent="      "))
    return lines


def cmd_plugins(as_json: bool, out) -> int:
    import corenn
    from corenn import plugins

    listed = plugins.list_plugins()
    summaries = [record.to_dict() for record in listed]
    if as_json:
        json.dump({"corenn": corenn.__version__, "plugins": summaries}, out, indent=2)
        out.write("\n")
        return 0
    builtin = sum(1 for r in listed if r.builtin)
    out.write(f"corenn {corenn.__version__}: {len(listed)} plugins ({builtin} built-in)\n")
    for record, summary in zip(listed, summaries):
        origin = f"{record.distribution or '(registered at run time)'} {record.version or ''}".rstrip()
        out.write(f"{record.name}  {origin}  {_status_text(record)}\n")
        if record.entry_point:
            out.write(f"  entry point: {record.entry_point}\n")
        if record.hooks:
            out.write(f"  hooks: {', '.join(record.hooks)}\n")
        if record.devices:
            out.write(f"  devices: {', '.join(record.devices)}\n")
        if record.process_group_backends:
            out.write(f"  process-group backends: {', '.join(record.process_group_backends)}\n")
        for label, count in (("FX leaf rules", summary["fx_leaf_rules"]),
                             ("module state handlers", summary["module_state_handlers"]),
                             ("op observers", summary["op_observers"])):
            if count:
                out.write(f"  {label}: {count}\n")
        kernel_lines = _kernel_lines(summary["kernels"])
        if kernel_lines and record.status != "active":
            kernel_lines[0] += "  -- not dispatched while " + record.status
        for line in kernel_lines:
            out.write(line + "\n")
        for line in record.detached:  # failed at run time and taken out; the rest of the plugin still runs
            out.write(f"  detached: {line}\n")
        if record.import_paths:
            out.write("  import paths:\n")
            for path, target in sorted(record.import_paths.items()):
                out.write(f"    {path} -> {target}\n")
    return 0


def _blas() -> str:
    import numpy as np
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        return f"{blas.get('name', 'unknown')} {blas.get('version', '')}".strip()
    except Exception:  # older numpy without mode="dicts": don't let info fail over a detail
        return "unknown"


def _info() -> dict:
    import numpy as np

    import corenn
    from corenn import dispatch, plugins

    devices, available = [], []
    for backend in dispatch.backends:
        try:
            count = backend.device_count()
            available += [backend.type] if backend.default_index is None else [
                f"{backend.type}:{i}" for i in range(count)]
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # a plugin's backend, even one calling sys.exit(): info must complete
            count = f"error: {plugins._describe(error)}"
        devices.append({"type": backend.type, "count": count, "provider": backend.source,
                        "description": backend.description})
    return {
        "corenn": corenn.__version__,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "numpy": np.__version__,
        "blas": _blas(),
        "devices": devices,
        "available_devices": available,  # as dispatch.available_devices(), without a failing backend
        "environment": {name: os.environ[name] for name in _ENV_SWITCHES if name in os.environ},
        "plugins": [{"name": r.name, "distribution": r.distribution, "version": r.version, "status": r.status,
                     "reason": r.reason} for r in plugins.list_plugins()],
        "plugin_lines": {record.name: lines for record, lines in plugins.info_lines()},
    }


def cmd_info(as_json: bool, out) -> int:
    info = _info()
    if as_json:
        json.dump(info, out, indent=2, default=str)
        out.write("\n")
        return 0
    out.write(f"corenn: {info['corenn']}\n")
    out.write(f"python: {info['python']} ({info['platform']})\n")
    out.write(f"numpy: {info['numpy']}\n")
    out.write(f"BLAS: {info['blas']}\n")
    out.write(f"devices available: {', '.join(info['available_devices']) or 'none'}\n")
    for d in info["devices"]:
        out.write(f"  {d['type']}: {d['count']} from {d['provider']}" + (f"; {d['description']}" if d["description"]
                                                                          else "") + "\n")
    if info["environment"]:
        out.write("environment: " + " ".join(f"{k}={v}" for k, v in info["environment"].items()) + "\n")
    out.write("plugins:\n")
    for p in info["plugins"]:
        status = p["status"] + (f": {p['reason']}" if p["reason"] else "")
        out.write(f"  {p['name']} ({p['distribution'] or 'run time'} {p['version'] or ''}".rstrip() + f"): {status}\n")
        for line in info["plugin_lines"].get(p["name"], ()):
            out.write(f"    {line}\n")
    return 0


def signature_text(function) -> str:
    """``def name(arg: Type) -> Return`` as written in hookspecs.py (annotations are strings there)."""
    return f"def {function.__name__}{inspect.signature(function)}".replace("'", "")


def cmd_hooks(out) -> int:
    from corenn import hookspecs

    for name, function in inspect.getmembers(hookspecs, inspect.isfunction):
        if not name.startswith("corenn_"):
            continue
        summary = (inspect.getdoc(function) or "").splitlines()[0]
        out.write(f"{signature_text(function)}\n    {summary}\n")
    return 0


KERNELS_MD_COMMAND = "python -m corenn kernels --markdown > docs/kernels.md"

_KERNELS_MD_HEADER = f"""# Kernel reference

<!-- Generated from the kernel registry by `{KERNELS_MD_COMMAND}`; do not edit.
     tests/test_kernels_reference.py fails when this file and the registry differ. -->

Every op of the core, with the signature of its kernel: what a kernel override
(`corenn_register_kernels`, [writing-plugins.md](writing-plugins.md)) receives and must
return. An override subclasses the core kernel (`corenn.kernels.core_kernel(op)`) and keeps
its `forward` signature; `corenn.kernels.KernelOverride` runs the core kernel for inputs the
override does not handle.

- **`forward(ctx, ...)`**: the front end passes an op's tensor inputs positionally, as raw
  arrays of the device's array module (`ctx.xp`), and its settings (axes, shapes, flags)
  by keyword. A parameter that Python allows both ways (softmax's `axis`) may come either
  way: accept both, as the core kernel does. `forward` returns an array, or a tuple of
  `outputs` arrays.
- **`backward(ctx, grad_output)`** receives the gradient of the output (a tuple, one per
  output, `None` for outputs that got none, when `outputs` is not 1) and returns one
  gradient or `None` per positional argument `forward` received: `len(ctx.needs_input_grad)`
  of them, each of its input's shape. `ctx.needs_input_grad[i]` says whether input `i`'s is
  wanted. Arrays reach `backward` only through `ctx.save_for_backward(...)` (`ctx.saved`).
- **outputs**: `num_outputs` (`n` when it depends on the arguments, as for `split`).
  **grad**: `no` marks `differentiable = False` ops: their outputs never require grad
  and `backward` is never called.
- Kernels are registered for device type `*`: every backend whose `xp` speaks numpy's API.
"""


def kernels_markdown() -> str:
    """``docs/kernels.md``: every core op's kernel, from the registry (:func:`corenn.kernels.core_kernels`).

    Example::

        >>> kernels_markdown().splitlines()[0]
        '# Kernel reference'
    """
    from corenn.kernels import core_kernels

    lines = [_KERNELS_MD_HEADER, "| op | `forward(ctx, ...)` | outputs | grad | kernel | what it computes |",
             "|---|---|---|---|---|---|"]
    for op, kernel in sorted(core_kernels().items()):
        outputs = "n" if kernel.num_outputs < 0 else str(kernel.num_outputs)
        if kernel.differentiable_outputs is not None:
            outputs += " (grad: " + ", ".join(str(i) for i, d in enumerate(kernel.differentiable_outputs) if d) + ")"
        summary = " ".join((inspect.getdoc(kernel) or "").split("\n\n")[0].split()) if kernel.__doc__ else ""
        lines.append(f"| `{op}` | `{_forward_signature(kernel)}` | {outputs} | "
                     f"{'yes' if kernel.differentiable else 'no'} | `{kernel.__qualname__}` in `{kernel.__module__.replace('.', '/')}.py` | "
                     f"{summary.replace('|', '&#124;')} |")
    return "\n".join(lines) + "\n"


def _forward_signature(kernel) -> str:
    """``(a, b, alpha=1)``: forward's parameters without ``ctx`` and without annotations."""
    parameters = list(inspect.signature(kernel.forward).parameters.values())[1:]
    return str(inspect.Signature([p.replace(annotation=p.empty) for p in parameters])).replace("|", "&#124;")


def cmd_kernels(markdown: bool, out) -> int:
    from corenn import dispatch
    from corenn.kernels import core_kernels

    if markdown:
        out.write(kernels_markdown())
        return 0
    for op, kernel in sorted(core_kernels().items()):
        out.write(f"{op}{_forward_signature(kernel)}  outputs={kernel.num_outputs if kernel.num_outputs >= 0 else 'n'}"
                  f"{'' if kernel.differentiable else ' not differentiable'}  "
                  f"cpu: {dispatch.kernels.source_of(op, 'cpu')}\n")
    return 0


def main(argv: list[str] | None = None, out=None) -> int:
    """Entry point of ``python -m corenn`` (and the ``corenn`` console script); returns the exit status.

    Example::

        >>> main(["plugins", "--json"])   # doctest: +SKIP
        0
    """
    import corenn

    out = out or sys.stdout
    parser = argparse.ArgumentParser(prog="python -m corenn", description="corenn: see what is installed.")
    parser.add_argument("--version", action="version", version=f"corenn {corenn.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="{plugins,info,hooks,kernels}")
    plugins_parser = commands.add_parser("plugins", help="list plugins: status, distribution, hooks, devices, kernels")
    plugins_parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    info_parser = commands.add_parser("info", help="versions, BLAS, devices, plugins: paste into a bug report")
    info_parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    commands.add_parser("hooks", help="list the hooks a plugin can implement")
    kernels_parser = commands.add_parser("kernels", help="every op's kernel signature, and who runs it on cpu")
    kernels_parser.add_argument("--markdown", action="store_true", help="print docs/kernels.md")
    args = parser.parse_args(argv)
    if args.command == "plugins":
        return cmd_plugins(args.json, out)
    if args.command == "info":
        return cmd_info(args.json, out)
    if args.command == "hooks":
        return cmd_hooks(out)
    if args.command == "kernels":
        return cmd_kernels(args.markdown, out)
    parser.print_help(out)
    return 0


if __name__ == "__main__":
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `python -m corenn plugins | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 0
    sys.exit(status)

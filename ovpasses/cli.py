"""``ovpass``: a thin command-line shell over ovpasses (argument parsing, file I/O, exit codes).

The work is done by :mod:`ovpasses.runner` (pipeline, inspection, side-by-side check) and
:mod:`ovpasses.io` (safe IR reading and writing); this module only wires arguments to them.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import ovpasses
from ovpasses import folder, io, runner
from ovpasses.errors import OvpassesError
from ovpasses.pipeline import KV_SHARING_MODES

EXIT_OK = 0
EXIT_WORSE = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3

EPILOG = """\
exit codes:
  0  success (check: the rewritten model is at least as good as the original)
  1  check: the rewritten model is worse (it fails where the original runs, or its outputs differ
     beyond the tolerance)
  2  usage or input error (bad arguments, a missing or damaged IR, a refused output path); nothing
     is written
  3  unexpected internal failure (rerun with --debug for the traceback and report it)

Run 'ovpass COMMAND --help' for the options of a command.
"""

RUNTIME_HELP = ("OpenVINO release whose profile to apply: 'auto' (default: the installed runtime, "
                f"{ovpasses.profile_for().version_string}) or a version such as 2026.0")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``ovpass: error: <message> (see 'ovpass ... --help')``."""

    def error(self, message: str):  # noqa: D401 - argparse hook
        sys.stderr.write(f"ovpass: error: {message} (see '{self.prog} --help')\n")
        sys.exit(EXIT_USAGE)


def _add_common(sub: argparse.ArgumentParser, runtime: bool = True) -> None:
    sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                     help="show tracebacks and debug logging instead of one-line errors")
    if runtime:
        sub.add_argument("--runtime", default="auto", metavar="auto|VERSION", help=RUNTIME_HELP)
        sub.add_argument("--kv-sharing", choices=KV_SHARING_MODES, default="keep",
                         help="keep (default): shared KV caches stay shared; unshare: give each borrower a cache "
                              "of its own, so the plugin fuses every layer, at extra cache memory per token")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ovpass",
        description="Rewrite, inspect and check OpenVINO IR files whose LLM layers share KV caches.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version",
                        version=f"ovpass {ovpasses.__version__} (openvino {ovpasses.profile_for().version_string})")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = subs.add_parser(
        "rewrite", help="run the pipeline on an IR and write the result",
        description="Read IN.xml (+ IN.bin), run the ovpasses pipeline for the runtime profile and write "
                    "OUT.xml (+ OUT.bin). Weights keep their element types; tensor names, friendly names "
                    "and runtime info are kept. Files are written to temporary names in the output folder "
                    "and renamed into place, so a failure leaves no partial IR and the input is never "
                    "modified (except by a successful --in-place).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", metavar="IN.xml")
    p.add_argument("-o", "--output", metavar="OUT.xml", help="where to write the rewritten IR (.bin beside it)")
    p.add_argument("--in-place", action="store_true", help="overwrite IN.xml and IN.bin (safely, by rename)")
    p.add_argument("--dry-run", action="store_true", help="run the pipeline and print the summary; write nothing")
    p.add_argument("--passes", metavar="NAME,...",
                   help="run only these passes (names from 'ovpass passes'): the pipeline plans as usual, "
                        "the named passes do what they do in the full pipeline, the others are skipped and "
                        "the SDPAs they would change are reported as not applied")
    p.add_argument("--format", choices=("text", "json"), default="text", help="summary format (default text)")
    _add_common(p)

    p = subs.add_parser(
        "inspect", help="print the KV-sharing map: which SDPA reads which cache, and the planned action",
        description="Print which ScaledDotProductAttention reads which KV cache variable, who owns and who "
                    "borrows each cache, and what 'ovpass rewrite' would do to each SDPA on the runtime. "
                    "json follows the schema 'ovpass.inspect/1' (README.md); dot is Graphviz text.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", metavar="IN.xml")
    p.add_argument("--format", choices=("text", "json", "dot"), default="text", help="output format (default text)")
    _add_common(p)

    p = subs.add_parser(
        "check", help="run the original and the rewritten model side by side and compare",
        description="Compile the original and the rewritten model, run a prefill and N decode steps with the "
                    "same inputs through each (input_ids, attention_mask, position_ids and beam_idx are "
                    "recognised; other inputs get seeded random data) and report whether each compiled and "
                    "ran, the largest output difference and the fused SDPA count of each. On CPU it compiles "
                    f"with {json.dumps(runner.EXACT_CPU_CONFIG)} unless --precision default. Exit 0 when the "
                    "rewritten model is at least as good: it runs whenever the original runs, and when both "
                    "run every output agrees within atol + rtol * max|original output|.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", metavar="IN.xml")
    p.add_argument("--device", default="CPU", help="OpenVINO device (default CPU)")
    p.add_argument("--steps", type=_non_negative, default=3, help="decode steps after the prefill (default 3)")
    p.add_argument("--prefill", type=_positive, default=8, help="prefill length in tokens (default 8)")
    p.add_argument("--precision", choices=("exact", "default"), default="exact",
                   help="exact (default): CPU in f32 with an f32 KV cache; default: the device defaults")
    p.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance (default 1e-4)")
    p.add_argument("--rtol", type=float, default=1e-4,
                   help="tolerance relative to the largest |original output| (default 1e-4)")
    p.add_argument("--passes", metavar="NAME,...", help="rewrite with only these passes (as in 'ovpass rewrite')")
    p.add_argument("--format", choices=("text", "json"), default="text", help="report format (default text)")
    _add_common(p)

    p = subs.add_parser("passes", help="list the passes of the pipeline, one line each",
                        description="List the passes of the pipeline in the order it runs them.")
    _add_common(p, runtime=False)
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _runtime(args) -> str | None:
    runtime = None if args.runtime == "auto" else args.runtime
    ovpasses.profile_for(runtime)  # rejects a malformed or unsupported version before any work
    return runtime


def cmd_rewrite(args) -> int:
    runtime = _runtime(args)
    passes = runner.parse_passes(args.passes)
    source = Path(args.input)
    if source.is_dir():
        return _rewrite_folder(args, source, runtime, passes)
    if args.in_place and args.output and not io.same_ir(args.output, source):
        raise OvpassesError("--in-place writes over IN.xml; drop -o, or drop --in-place to write to -o")
    target = source if args.in_place else (Path(args.output) if args.output else None)
    if target is None and not args.dry_run:
        raise OvpassesError("say where to write: -o OUT.xml, --in-place, or --dry-run to write nothing")
    io.check_ir_file(source)
    if target is not None:
        io.check_output_path(target)
        if not args.in_place:
            io.check_distinct_output(source, target)
    model = io.read_ir(source)
    summary = ovpasses.rewrite(model, runtime, passes, kv_sharing=args.kv_sharing)
    if not args.dry_run:
        io.write_ir(model, target)
    if args.format == "json":
        data = summary.to_dict()
        data["input"] = str(source)
        data["output"] = None if args.dry_run else str(target)
        data["changed"] = summary.changed
        print(json.dumps(data, indent=2))
    else:
        print(summary)
        if args.dry_run:
            print("dry run: nothing written")
        else:
            print(f"wrote {target} and {io.weights_path(target).name}")
    return EXIT_OK


def _rewrite_folder(args, source: Path, runtime, passes) -> int:
    if args.in_place and args.output and Path(args.output).resolve() != source.resolve():
        raise OvpassesError("--in-place writes over the input folder; drop -o, or drop --in-place to write to -o")
    if not (args.in_place or args.output or args.dry_run):
        raise OvpassesError("say where to write: -o NEW_FOLDER, --in-place, or --dry-run to write nothing")
    target = None if args.dry_run else source if args.in_place else Path(args.output)
    summary = folder.rewrite_folder(source, target, runtime, passes, in_place=args.in_place and not args.dry_run,
                                    kv_sharing=args.kv_sharing)
    if args.format == "json":
        print(json.dumps(summary.to_dict(), indent=2))
    else:
        print(summary)
        print("dry run: nothing written" if target is None else f"wrote {target}")
    return EXIT_OK


def cmd_inspect(args) -> int:
    runtime = _runtime(args)
    report = runner.inspect_model(io.read_ir(args.input), runtime, kv_sharing=args.kv_sharing)
    if args.format == "json":
        print(json.dumps(report, indent=2))
    elif args.format == "dot":
        sys.stdout.write(runner.inspect_dot(report))
    else:
        sys.stdout.write(runner.inspect_text(report))
    return EXIT_OK


def cmd_check(args) -> int:
    runtime = _runtime(args)
    passes = runner.parse_passes(args.passes)
    model = io.read_ir(args.input)
    config = None if args.precision == "exact" else {}
    report = runner.check_model(model, device=args.device, steps=args.steps, runtime=runtime, config=config,
                                passes=passes, prefill=args.prefill, atol=args.atol, rtol=args.rtol,
                                kv_sharing=args.kv_sharing)
    print(report.to_json() if args.format == "json" else report)
    return EXIT_OK if report.ok else EXIT_WORSE


def cmd_passes(args) -> int:
    width = max(map(len, runner.PASSES))
    for name, (_cls, line) in runner.PASSES.items():
        print(f"{name:<{width}}  {line}")
    return EXIT_OK


COMMANDS = {"rewrite": cmd_rewrite, "inspect": cmd_inspect, "check": cmd_check, "passes": cmd_passes}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_OK
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, stream=sys.stderr,
                        format="ovpass: %(levelname)s: %(message)s" if not args.debug else
                        "%(levelname)s %(name)s: %(message)s")
    try:
        return COMMANDS[args.command](args)
    except OvpassesError as exc:
        if args.debug:
            raise
        sys.stderr.write(f"ovpass: error: {_one_line(str(exc))}\n")
        return EXIT_USAGE
    except BrokenPipeError:  # the reader of stdout went away (e.g. '| head'): not an error of ours
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stderr.write("ovpass: error: interrupted; nothing was written\n")
        return 130
    except Exception as exc:  # noqa: BLE001 - the shell turns every failure into one line
        if args.debug:
            raise
        sys.stderr.write(f"ovpass: error: unexpected {type(exc).__name__}: {_one_line(str(exc))} "
                         "(rerun with --debug for the traceback)\n")
        return EXIT_INTERNAL


def _one_line(message: str) -> str:
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


if __name__ == "__main__":
    sys.exit(main())

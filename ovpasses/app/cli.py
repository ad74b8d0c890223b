"""``ovpass``: a thin command-line shell over ovpasses (argument parsing, file I/O, exit codes).

The work is done by the application's flows over the library: :mod:`ovpasses.app.ir_file` and
:mod:`ovpasses.app.folder` (``rewrite`` of an IR file and of an export folder), :mod:`ovpasses.app.inspect`
(the KV-sharing report, :mod:`ovpasses.report.inspect`), :mod:`ovpasses.app.check.folder` (the side-by-side
check of a file or a folder), :mod:`ovpasses.app.files` (safe IR reading and writing, commits) and
:mod:`ovpasses.app.render` (text and DOT); this module only wires arguments to them and prints.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from ovpasses import pipeline
from ovpasses.app import arguments, check, folder, inspect, ir_file
from ovpasses.app.arguments import EXIT_INCONCLUSIVE, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, EXIT_WORSE
from ovpasses.app.check import folder as check_folder
from ovpasses.app.check import inputs as check_inputs
from ovpasses.app.files import commit, export_scan, io, signals
from ovpasses.app.render import inspect as render_inspect
from ovpasses.app.render import text
from ovpasses.errors import ErrorCode, OvpassesError
from ovpasses.options import MODES, RewriteOptions

log = logging.getLogger(__name__)

# the exit code of each check verdict
CHECK_EXIT = {check.OK: EXIT_OK, check.FIXED: EXIT_OK, check.WORSE: EXIT_WORSE, check.INCONCLUSIVE: EXIT_INCONCLUSIVE}


def _options(args, form: dict | None = None) -> RewriteOptions:
    """The rewrite's options, from the arguments (the modes from ``form`` where ``--for`` chose one): a malformed
    or unsupported value is rejected here, before any work."""
    if form is None and args.sliding_window_margin and args.sliding_window == "full":   # it would be ignored
        raise OvpassesError(f"--sliding-window-margin {args.sliding_window_margin} needs --sliding-window bounded "
                            f"or trimmable")
    modes = {name: getattr(args, name) for name in MODES} if form is None else form
    return RewriteOptions(runtime=None if args.runtime == "auto" else args.runtime,
                          passes=getattr(args, "passes", None), **modes,
                          sliding_window_margin=args.sliding_window_margin)


def _for_client(args) -> RewriteOptions:
    """``--for CLIENT``: the options of the form that pays, said in one line (stdout, or stderr with JSON)."""
    from ovpasses.app.bench.choose import choose, form_options, trimmer_note

    if args.for_client is None:
        if args.context is not None or args.from_bench is not None:
            raise OvpassesError("--context and --from-bench go with --for CLIENT")
        return _options(args)
    given = [f"--{name.replace('_', '-')}" for name in MODES
             if getattr(args, name) != RewriteOptions.__dataclass_fields__[name].default.value]
    if given:
        raise OvpassesError(f"--for picks the form itself: drop {', '.join(given)} (or drop --for to set it yourself)")
    _check_for_input(Path(args.input))
    form, why = choose(Path(args.input), args.for_client, args.context, args.from_bench)
    out = sys.stderr if args.format == "json" else sys.stdout
    print(text.fit(f"--for {args.for_client}: {form}: {why}"), file=out)
    for line in trimmer_note(args.for_client, form):
        print(f"  {line}", file=out)
    return _options(args, form_options(form))


def _check_for_input(source: Path) -> None:
    """What ``--for`` reads, refused in one line before it chooses, as the rewrite would refuse it: a missing,
    empty or damaged IR, a folder with no IR or a damaged one, a model without attention. An image-text export
    is refused too: the records ``--for`` advises from measured text exports only."""
    from ovpasses.app.bench.run import decoder_xml

    decoder = decoder_xml(source)
    if source.is_dir():
        scan = export_scan.scan_export(source)   # a folder whose IRs hold no stateful attention is refused here
        if decoder.name not in scan.stateful:
            raise OvpassesError(f"{source}: --for advises from measurements of text exports ({decoder.name}), and "
                                f"this folder's decoder is {scan.stateful[0]}: give the mode flags yourself "
                                "(--sliding-window bounded is checked on image-text exports: "
                                "docs/guides/sliding-window-bounded.md)")
        io.read_ir(decoder)   # an IR that parses as XML but OpenVINO cannot read: worded as the rewrite words it
        return
    io.check_ir_file(source)
    # a state-space model refused, then any IR without stateful attention, from one walk of the XML and before
    # OpenVINO reads it (a tokenizer IR is read where openvino_tokenizers is imported, refused elsewhere)
    if not export_scan.refuse_without_attention(source):
        raise OvpassesError(f"{source}: --for advises a form for an LLM's decoder, and this IR holds no stateful "
                            "attention (ReadValue and ScaledDotProductAttention or Softmax); give the decoder's .xml "
                            "(openvino_model.xml) or its export folder")
    io.read_ir(source)


def cmd_rewrite(args) -> int:
    options = _for_client(args)
    source = Path(args.input)
    if os.path.isdir(source):   # False for any path that cannot be reached: check_ir_file says why
        return _rewrite_folder(args, source, options)
    if args.in_place and args.output and not io.same_ir(args.output, source):
        raise OvpassesError("--in-place writes over IN.xml; drop -o, or drop --in-place to write to -o")
    target = source if args.in_place else (Path(args.output) if args.output else None)
    if target is None and not args.dry_run:
        raise OvpassesError("say where to write: -o OUT.xml, --in-place, or --dry-run to write nothing")
    replaced = not args.dry_run and ir_file.replaces(target)
    summary = ir_file.rewrite_file(source, target, options, in_place=args.in_place, dry_run=args.dry_run)
    written = not args.dry_run and ir_file.written(summary, args.in_place)
    if args.format == "json":
        data = text.with_warning_texts(summary.to_dict())
        data["input"] = str(source)
        data["output"] = None if args.dry_run else str(target)
        data["replaced"] = replaced
        data["changed"] = summary.changed
        data["written"] = written
        print(json.dumps(data, indent=2))
    else:
        print(text.fit(text.summary_text(summary, export_scan.export_family(source.parent))))
        if args.dry_run:
            print("dry run: nothing written")
        elif not summary.changed:
            print(f"nothing changed: {target} left as it is" if not written else
                  f"nothing changed: {target} and {io.weights_path(target).name} hold the input as read")
        else:
            print(f"{'replaced' if replaced else 'wrote'} {target} and {io.weights_path(target).name}")
    return EXIT_OK


def _rewrite_folder(args, source: Path, options: RewriteOptions) -> int:
    if args.in_place and args.output and Path(args.output).resolve() != source.resolve():
        raise OvpassesError("--in-place writes over the input folder; drop -o, or drop --in-place to write to -o")
    if not (args.in_place or args.output or args.dry_run):
        raise OvpassesError("say where to write: -o NEW_FOLDER, --in-place, or --dry-run to write nothing")
    target = None if args.dry_run else source if args.in_place else Path(args.output)
    summary = folder.rewrite_folder(source, target, options, in_place=args.in_place and not args.dry_run,
                                    symlinks=args.symlinks)
    if args.format == "json":
        print(json.dumps(summary.to_dict(), indent=2))
    else:
        print(text.fit(str(summary)))
        print(text.fit("dry run: nothing written" if target is None else f"wrote {target}" if summary.changed else
                       f"nothing changed: {target} holds the input folder's files as read"))
    return EXIT_OK


def cmd_inspect(args) -> int:
    options = _options(args)
    source = Path(args.input)
    result = inspect.inspect_path(source, options)
    if args.format == "json":
        result.reports = [(name, text.with_warning_texts(report)) for name, report in result.reports]
        print(json.dumps(result.to_dict(), indent=2))
        return EXIT_OK
    if args.format == "dot":
        for _name, report in result.reports:
            sys.stdout.write(render_inspect.inspect_dot(report))
        return EXIT_OK
    for index, (name, report) in enumerate(result.reports):
        if name is not None:
            print(f"{'' if index == 0 else chr(10)}== {name} ==")
        sys.stdout.write(text.fit(render_inspect.inspect_text(report, verbose=args.verbose, family=result.family)))
    if result.skipped:
        print(text.fit(f"\n{render_inspect.skipped_text(result.skipped)}"))
    return EXIT_OK


def cmd_check(args) -> int:
    options = _options(args)
    data_shapes = check_inputs.parse_data_shape(args.data_shape)
    result = check_folder.check_path(
        Path(args.input), device=args.device, steps=args.steps, options=options,
        config=None if args.precision == "exact" else {}, prefill=args.prefill, atol=args.atol,
        rtol=args.rtol, data_shapes=data_shapes, with_genai=args.genai, prefill_chunk=args.prefill_chunk)
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=2) if result.is_folder else result.reports[0][1].to_json())
    else:
        for index, (name, report) in enumerate(result.reports):
            if result.is_folder:
                print(f"{'' if index == 0 else chr(10)}== {name} ==")
            print(text.fit(str(report)))
        for report in [*result.genai, *result.genai_paths]:
            print(text.fit(str(report)))
        if result.skipped:
            print(text.fit(f"\n{render_inspect.skipped_text(result.skipped)}"))
        if result.is_folder:
            print(f"\nfolder verdict: {result.verdict.upper()}")
    return CHECK_EXIT[result.verdict]


def cmd_passes(args) -> int:
    width = max(map(len, pipeline.PASSES))
    for name, (cls, line) in pipeline.PASSES.items():
        only = getattr(cls, "ONLY_WITH", None)
        print(text.fit(f"{name:<{width}}  {'' if only is None else text.option_flag(only) + ' only: '}{line}",
                       hanging=width + 2))
    return EXIT_OK


def cmd_bench(args) -> int:
    from ovpasses.app.bench import bench
    from ovpasses.app.render.bench import bench_plot, bench_text

    source = Path(args.input)
    if not source.is_dir():
        raise OvpassesError(f"{source}: bench measures an export folder (optimum-cli export openvino); give the "
                            "folder, not a file")
    export_scan.scan_export(source)   # a folder with no IR, or a damaged one, is refused here as everywhere
    report = bench(source, args.client, arguments.contexts(args.context), args.chunk, args.steps, args.goal,
                   rounds=args.rounds,
                   progress=lambda message: print(message, file=sys.stderr, flush=True))
    if args.plot and report.rows:
        bench_plot(report, args.plot)
    if args.format == "json":
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(text.fit(bench_text(report)))
    if report.interrupted:
        return 128 + signal.SIGINT
    return EXIT_OK if report.measured else EXIT_USAGE


COMMANDS = {"rewrite": cmd_rewrite, "inspect": cmd_inspect, "check": cmd_check, "bench": cmd_bench,
            "passes": cmd_passes}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    arguments.STATE.json_errors = arguments.wants_json(argv)
    parser = arguments.build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_OK
    try:
        with signals.raising(), _log_to_stderr(args.debug):
            if getattr(args, "input", None) is not None:
                commit.settle(Path(args.input))   # what an interrupted commit left, before the input is judged
            return COMMANDS[args.command](args)
    except OvpassesError as exc:
        return _fail(args, EXIT_USAGE, exc.code, text.error_text(exc))
    except BrokenPipeError:  # the reader of stdout went away (e.g. '| head'): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt as exc:   # signals.Interrupted included
        code = exc.exit_code if isinstance(exc, signals.Interrupted) else 128 + signal.SIGINT
        return _fail(args, code, ErrorCode.INTERRUPTED, _interrupted(exc), traceback=False)
    except Exception as exc:  # noqa: BLE001 - the shell turns every failure into one line
        return _fail(args, EXIT_INTERNAL, ErrorCode.INTERNAL, f"unexpected {type(exc).__name__}: {exc}"
                     + ("" if args.debug else " (rerun with --debug for the traceback)"))


def _fail(args, exit_code: int, code: ErrorCode, message: str, traceback: bool = True) -> int:
    """Report a failure: its traceback first with ``--debug``, then the error (one line on stderr, and the
    ``ovpass.error/1`` object on stdout under ``--format json``); the exit code is the same either way."""
    if args.debug and traceback:
        import traceback as tb
        tb.print_exc(file=sys.stderr)
    line = _one_line(message)
    if arguments.STATE.json_errors:
        arguments.print_json_error(code, line)
    sys.stderr.write(f"ovpass: error: {line}\n")
    return exit_code


def _interrupted(exc: KeyboardInterrupt) -> str:
    """What an interrupted run leaves, truly: signals wait while a commit renames (ovpasses.app.files.signals), so
    a run stops either before its commit or after it."""
    name = f"by {exc.args[0]}" if isinstance(exc, signals.Interrupted) else "by SIGINT"
    kept = [path for path in dict.fromkeys(commit.COMMITTED) if os.path.lexists(path)]   # not temporary folders
    if not kept:
        return f"interrupted {name}; nothing was written"
    written = ", ".join(str(path) for path in kept)
    return f"interrupted {name} after the rewrite was written: the new version is in {written}"


@contextlib.contextmanager
def _log_to_stderr(debug: bool) -> Iterator[None]:
    """ovpasses' log records on stderr for one command: one line each (``--debug``: every record, with its
    logger's name). Undone after it, so that main() can run again in the same process (the tests do)."""
    logger = logging.getLogger("ovpasses")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s") if debug else _OneLineFormatter())
    before = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.WARNING)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before[0])
        logger.propagate = before[1]


class _OneLineFormatter(logging.Formatter):
    """A log record as one line: ``ovpass: warning: <message>``."""

    def format(self, record: logging.LogRecord) -> str:
        return f"ovpass: {record.levelname.lower()}: {_one_line(record.getMessage())}"



def _one_line(message: str) -> str:
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


if __name__ == "__main__":
    sys.exit(main())

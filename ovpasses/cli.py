"""``ovpass``: a thin command-line shell over ovpasses (argument parsing, file I/O, exit codes)."""

from __future__ import annotations

import argparse
import sys

import ovpasses


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ovpass",
        description="Rewrite, inspect and check OpenVINO IR files whose LLM layers share KV caches.",
    )
    parser.add_argument("--version", action="version", version=f"ovpass {ovpasses.__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``ovpass bench``: each form of a model measured on this machine for a client, and the one that pays
(:mod:`ovpasses.app.bench.run`); each measurement in a process of its own (:mod:`ovpasses.app.bench.worker`)."""

from ovpasses.app.bench.run import CLIENTS, FORMS, SCHEMA, BenchReport, BenchRow, bench, command, load, recommend

__all__ = ["CLIENTS", "FORMS", "SCHEMA", "BenchReport", "BenchRow", "bench", "command", "load", "recommend"]

"""Synthetic graphs, references and runners shared by tests, property strategies and benchmarks."""

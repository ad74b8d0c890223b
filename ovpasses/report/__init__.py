"""Reports: what the pipeline found and did, rendered for people (text), programs (JSON) and Graphviz (DOT).
The schema ids of every JSON report are in :mod:`~ovpasses.report.schemas`."""

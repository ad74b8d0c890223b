"""Report data: what the pipeline found and did, as plain data for programs (the inspect report,
:mod:`~ovpasses.report.inspect`) and the schema id of every JSON report (:mod:`~ovpasses.report.schemas`).
Rendering it for people is the application's (:mod:`ovpasses.app.render`)."""

"""Files: reading and writing an IR safely (:mod:`~ovpasses.app.files.io`), replacing files as one artefact
(:mod:`~ovpasses.app.files.commit`, its journal :mod:`~ovpasses.app.files.journal` on the operations of
:mod:`~ovpasses.app.files.fsops`) and the signals that wait during a commit (:mod:`~ovpasses.app.files.signals`)."""

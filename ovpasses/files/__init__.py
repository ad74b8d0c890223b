"""Files: reading and writing an IR safely (:mod:`~ovpasses.files.io`), replacing files as one artefact
(:mod:`~ovpasses.files.commit`), export folders (:mod:`~ovpasses.files.folder`) and the signals that wait
during a commit (:mod:`~ovpasses.files.signals`)."""

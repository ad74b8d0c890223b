"""The application over the library: the ``ovpass`` command (:mod:`~ovpasses.app.cli`), the rewrite of an IR
file and of an export folder side by side (:mod:`~ovpasses.app.ir_file`, :mod:`~ovpasses.app.folder`), the
inspect flow over files (:mod:`~ovpasses.app.inspect`), the side-by-side check (:mod:`~ovpasses.app.check`),
the file layer (:mod:`~ovpasses.app.files`: safe IR reading and writing, commits, signals) and rendering
(:mod:`~ovpasses.app.render`: text and DOT).

The library (everything in ``ovpasses`` outside this package) never imports it; it imports the library.
"""

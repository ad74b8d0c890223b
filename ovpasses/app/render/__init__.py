"""Rendering for people: the sentence of each typed decision and the rewrite summary (:mod:`~ovpasses.app.render.text`),
the inspect report as text and Graphviz DOT (:mod:`~ovpasses.app.render.inspect`). JSON is the library's
``to_dict()`` data as it is."""

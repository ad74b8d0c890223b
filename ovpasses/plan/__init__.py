"""The plan: facts about runtimes (:mod:`~ovpasses.plan.runtimes`), the profile each release gets
(:mod:`~ovpasses.plan.profiles`) and the typed decisions the pipeline takes per node
(:mod:`~ovpasses.plan.decisions`). Pure: reads analyses, changes nothing."""

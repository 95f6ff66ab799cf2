"""A fix in the words of the framework that runs the step: its settings (:mod:`.words`) and the
user's own configuring line they are written into (:mod:`.config_line`)."""

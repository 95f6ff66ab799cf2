"""A run's speed across commits: one compact record per `advise profile` or gate, appended to a
file the user names (:mod:`.store`), and the trend and its change points read back (:mod:`.trend`)."""

"""Files on disk: atomic writes that never clobber what is not ours, one-writer locks, and how
paths in a configuration are resolved and shown."""

"""Serving economics: the exit frontier of one model (`fixedfirst frontier`) and the comparison of
the frontiers of every run of a study across schedules (`fixedfirst serving-economics`)."""

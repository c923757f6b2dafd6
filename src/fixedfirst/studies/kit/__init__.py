"""The study kit: what every study stands on, importing no study.

runs            a study's runs on disk: planned, trained or reused, checked before starting
workers         jobs in worker processes, side by side (`--jobs`)
conduct         `Study` and `conduct`: the one flow from runs to results.json and a report
presets         studies made from a preset: arms trained with every seed (`PresetStudy`)
settings        the [experiment] section every preset study shares, and its one validation
claims          `Claim`: a comparison named before the runs, decided by its own interval
results         the common result row of a run, and the line a finished evaluation prints
report_files    report.json and report.md made from it
paragraphs      the report paragraphs and primary and exploratory tables every report has
depth_scoring   any looped model scored on the chains task by depth, cached beside the run
depth_arms      arms scored by band and depth: intervals, primaries and Holm's family
depth_tables    the tables and figure of such arms
"""

"""A study's report and its numbers, at the path they had before the study kit: scripts and the
committed-reports test (tests/test_committed_reports.py) import them from here. They live in
`studies/kit/report_files.py`; a study imports them from there."""

from fixedfirst.studies.kit.report_files import Render, numbers_json, write_numbers_and_report

__all__ = ["Render", "numbers_json", "write_numbers_and_report"]

"""`fixedfirst inspect`: where a looped model spends depth, token by token.

`inspect_sequences` scores every position of some sequences at every serving depth (one pass of
the recurrence per window) and under every exit rule; `page_record` turns that into the JSON
record a page embeds; `write_page` writes the self-contained HTML page and, with it, the PNG
`draw_inspection` draws of the same picture. `sources` builds the sequences: a text, a task's
examples, or the run's validation sequences.
"""

from fixedfirst.inspection.figure import draw_inspection
from fixedfirst.inspection.measure import Inspection, inspect_sequences
from fixedfirst.inspection.page import is_our_page, read_page_record, write_page
from fixedfirst.inspection.record import page_record

__all__ = [
    "Inspection",
    "draw_inspection",
    "inspect_sequences",
    "is_our_page",
    "page_record",
    "read_page_record",
    "write_page",
]

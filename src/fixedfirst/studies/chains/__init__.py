"""The chains study: every schedule on a task where serving depth decides the answer."""

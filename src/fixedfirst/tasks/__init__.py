"""The tasks, above the library: data kinds with their own metric (bios recall, chains accuracy).

Importing this package registers the tasks' data kinds (`bios`, `chains`) with
`fixedfirst.data.registry`; the `fixedfirst` command imports it before it runs a command, and a
script that trains or scores a task from Python imports it (or the task's package) first. A new
task adds its package's `task` module here (docs/development/extending.md).
"""

from fixedfirst.tasks.bios import task as bios_task
from fixedfirst.tasks.chains import task as chains_task

__all__ = ["bios_task", "chains_task"]

"""Figure 1: the bios recall study (schedules at matched FLOPs, recall by serving depth)."""

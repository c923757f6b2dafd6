"""Finishing stages for models trained at one depth (issue 58)."""

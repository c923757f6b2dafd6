"""Fixed-first on a looped mixture-of-experts (issue 58)."""

"""The machine a run uses: its device, threads and peak FLOP rate; other accelerators; and
whether a run fits on GPUs that are not here (`fixedfirst plan`)."""

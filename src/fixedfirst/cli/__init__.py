"""The `fixedfirst` command line: one module per subcommand."""

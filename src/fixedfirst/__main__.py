"""`python -m fixedfirst` runs the command-line tool (this is what torchrun launches)."""

from fixedfirst.cli.main import main

if __name__ == "__main__":
    main()

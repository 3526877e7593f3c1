"""`python -m kvlogdiag` entry point."""

from kvlogdiag.cli.entry import main

if __name__ == "__main__":
    main()

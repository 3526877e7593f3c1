"""`python -m kvlogdiag` entry point."""

from kvlogdiag.cli.main import main

if __name__ == "__main__":
    main()

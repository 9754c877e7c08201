"""`python -m perftracker` runs the command-line interface."""

from perftracker.cli import main

main()

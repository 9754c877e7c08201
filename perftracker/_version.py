"""The version of perftracker, in a module of its own: any module may import it without importing the package's
lazy front (`perftracker/__init__.py`, which imports the API on first use)."""

__version__ = "0.1.0"

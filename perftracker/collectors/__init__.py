"""Collectors: each source in one module; `load` functions read offline files into Store tables."""

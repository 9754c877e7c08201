"""Nsight Systems input: `nsys export --type sqlite` files (and `.nsys-rep` reports, exported when `nsys` is on
PATH) read into the same Store tables as the Kineto path. The modules: docs/internals/collectors.md.
"""

"""Version of the Python package (the C library reports its own: dlrm.library_version())."""
__version__ = "0.1.0"

"""triage's version, recorded in every run it archives and shown by `triage --version`."""

__version__ = "0.1.0"

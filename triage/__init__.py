"""triage: a reproducibility archive and comparison tool for Nsight Systems and Nsight Compute.

This package is the top floor: `cli/` (the command line) and `views/` (text, Markdown and HTML
renderings of typed results). The floors below are mapped into it from their own folders:
`base/` (triage.base), `capture/`, `archive/`, `compare/`, `schemas/` and `templates/`;
docs/architecture.md draws them."""

from triage.base.version import __version__

__all__ = ["__version__"]

"""triage: a reproducibility archive and comparison tool for Nsight Systems and Nsight Compute."""

__version__ = "0.1.0"

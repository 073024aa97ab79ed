"""Versioned schemas of the run manifest and the Parquet tables: the single source of truth."""

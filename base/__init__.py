"""The ground floor: what every package of triage may import, and which imports nothing else of
triage (errors, hashing, units, time, progress, the DuckDB connection, the version)."""

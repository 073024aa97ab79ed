"""The store: content-addressed objects, run manifests, labels, Parquet tables and their queries."""

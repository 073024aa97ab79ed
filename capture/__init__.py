"""Reading profiler outputs and the machine they ran on: one reader per format, plus capture."""

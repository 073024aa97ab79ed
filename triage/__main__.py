"""Allow `python -m triage`."""

from triage.cli import main

main()

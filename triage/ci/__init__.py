"""The CI kit (`triage ci run`): capture, judge against the baseline, report where the review
happens (job summary, one merge-request comment, JUnit), remember (push), and fail the job on
the gate. A floor of its own, above the views it renders with and below the CLI that runs it."""

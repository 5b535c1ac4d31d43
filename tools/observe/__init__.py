"""Floor 4: reading what a run or a log shows: the line model and metrics (logs), the diagnosis engine
(diagnosis) and the evidence layer that declares, runs and observes one command (evidence)."""

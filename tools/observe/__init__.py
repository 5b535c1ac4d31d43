"""Floor 4: reading what a run or a log shows: the line model, the lines of a traceback and metrics (logs), the
diagnosis engine (diagnosis), search keywords of an error or a symptom (keywords) and the evidence layer that declares,
runs and observes one command (evidence)."""

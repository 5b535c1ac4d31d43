"""Numerical tools: checkpoint inspection (torch runs in a subprocess) and training-log analysis."""

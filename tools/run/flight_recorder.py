"""PyTorch's flight recorder in a run: where every rank's dump goes (the run's folder, DUMP_FOLDER)."""

from __future__ import annotations

DUMP_FOLDER = "flight_recorder"
"""Under a run's folder (`.rootcause/runs/<run_id>/flight_recorder/`): one file per rank and process group."""

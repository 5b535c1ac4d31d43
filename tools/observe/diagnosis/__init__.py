"""The diagnosis engine: from raw output (a run's log or a pasted log) to a Diagnosis."""

from rootcause.tools.observe.diagnosis.engine import diagnose_file, diagnose_run, diagnose_text
from rootcause.tools.observe.diagnosis.models import SIGNATURE_VERSION, Diagnosis, Frame, RankInfo, StackSummary

__all__ = [
    "SIGNATURE_VERSION",
    "Diagnosis",
    "Frame",
    "RankInfo",
    "StackSummary",
    "diagnose_file",
    "diagnose_run",
    "diagnose_text",
]

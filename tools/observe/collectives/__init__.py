"""PyTorch flight-recorder dumps: read safely (dumps), analysed per process group and rank (analysis), said in
one line per fact (text). Imports nothing of the diagnosis engine, which attaches the result to a Diagnosis."""

from rootcause.tools.observe.collectives.analysis import Report, analyse
from rootcause.tools.observe.collectives.dumps import DumpError, DumpSet, read_dumps
from rootcause.tools.observe.collectives.text import lines

__all__ = ["DumpError", "DumpSet", "Report", "analyse", "lines", "read_dumps"]

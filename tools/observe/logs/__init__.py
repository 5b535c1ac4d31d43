"""Reading training and run logs: line normalisation (lines.py and its steps), the lines of a Python traceback
defined once (traceback_lines.py), and the one metric extractor."""

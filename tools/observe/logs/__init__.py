"""Reading training and run logs: line normalisation and the one metric extractor."""

"""The one log reader: line normalisation (lines) shared by the diagnosis and the metric extractor."""

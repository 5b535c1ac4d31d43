"""Floor 2: the words of the field: the error taxonomy (categories), the one symptom vocabulary (symptoms,
words) and keywords. Data in vocabulary/data/."""

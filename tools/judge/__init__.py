"""Floor 6: the protocol's judgments: triage, the category of free text, the session baseline, the
verification gate, the stop rules, one experiment run."""

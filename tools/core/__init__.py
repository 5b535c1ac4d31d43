"""Floor 1: what every other floor needs: errors, results, the tool context, the workspace (root confinement),
redaction, git facts and name validation. Imports nothing of rootcause."""

"""Floor 8: one module per tool, named as the tool; each holds its pydantic input and result and the engine
function the catalog (server/catalog.py) names."""

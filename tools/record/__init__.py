"""Floor 5: what a session keeps: the event-log store, the typed evidence each tool records, the report."""

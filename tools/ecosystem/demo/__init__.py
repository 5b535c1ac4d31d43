"""`rootcause demo`: a bundled example project with a real bug and the driver that debugs it."""

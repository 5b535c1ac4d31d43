"""minitrain: batch padding and token-averaged losses, in plain Python."""

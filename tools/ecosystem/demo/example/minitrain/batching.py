"""Pad variable-length sequences into a rectangular batch with a mask of real tokens."""


def pad_batch(sequences: list[list[float]], pad: float = 0.0) -> tuple[list[list[float]], list[list[int]]]:
    """Pad every sequence to the longest one; the mask holds 1 for a real token and 0 for padding."""
    if not sequences:
        raise ValueError("an empty batch has nothing to pad")
    width = max(len(seq) for seq in sequences)
    padded = [list(seq) + [pad] * (width - len(seq)) for seq in sequences]
    mask = [[1] * len(seq) + [0] * (width - len(seq)) for seq in sequences]
    return padded, mask

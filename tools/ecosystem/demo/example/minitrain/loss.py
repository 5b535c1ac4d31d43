"""Token-averaged losses: every real token weighs the same, padding weighs nothing."""

from minitrain.batching import pad_batch


def masked_mean(values: list[float], mask: list[int]) -> float:
    """Mean of the values whose mask is 1; positions with mask 0 (padding) are ignored."""
    if len(values) != len(mask):
        raise ValueError(f"values and mask differ in length: {len(values)} != {len(mask)}")
    total = sum(value for value, keep in zip(values, mask, strict=True) if keep)
    count = len(values)
    if count == 0:
        raise ValueError("the batch holds no real token")
    return total / count


def batch_loss(per_token_losses: list[list[float]]) -> float:
    """The loss of a batch of sequences: the mean over all real tokens of every sequence."""
    padded, mask = pad_batch(per_token_losses)
    values = [value for row in padded for value in row]
    flat_mask = [keep for row in mask for keep in row]
    return masked_mean(values, flat_mask)

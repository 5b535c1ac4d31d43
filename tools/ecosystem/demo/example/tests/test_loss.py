import unittest

from minitrain.batching import pad_batch
from minitrain.loss import batch_loss, masked_mean


class PadBatchTest(unittest.TestCase):
    def test_mask_marks_real_tokens(self):
        padded, mask = pad_batch([[1.0, 2.0], [3.0]])
        self.assertEqual(padded, [[1.0, 2.0], [3.0, 0.0]])
        self.assertEqual(mask, [[1, 1], [1, 0]])


class MaskedMeanTest(unittest.TestCase):
    def test_without_padding(self):
        self.assertAlmostEqual(masked_mean([1.0, 2.0, 3.0], [1, 1, 1]), 2.0)

    def test_padding_does_not_change_the_loss(self):
        plain = masked_mean([1.0, 2.0, 3.0], [1, 1, 1])
        padded = masked_mean([1.0, 2.0, 3.0, 0.0, 0.0], [1, 1, 1, 0, 0])
        self.assertAlmostEqual(padded, plain, msg="padding changed the loss")

    def test_lengths_must_match(self):
        with self.assertRaises(ValueError):
            masked_mean([1.0], [1, 0])


class BatchLossTest(unittest.TestCase):
    def test_every_token_weighs_the_same(self):
        self.assertAlmostEqual(batch_loss([[1.0, 3.0], [2.0]]), 2.0)


if __name__ == "__main__":
    unittest.main()

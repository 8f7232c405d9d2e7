"""Classification against argsort, in Triton's "value:index[:label]" strings."""

import numpy as np

from atoll.kserve.classification import classify


def test_top_classes_of_each_row_with_labels():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 50)).astype(np.float32)
    labels = tuple(f"c{i}" for i in range(40))  # a short label file: the last classes have none
    out = classify(logits, 4, labels)
    assert out.shape == (3, 4) and out.dtype == object
    for row, strings in zip(logits, out):
        top = np.argsort(-row, kind="stable")[:4]
        assert [s.decode() for s in strings] == [f"{row[i]:f}:{i}" + (f":c{i}" if i < 40 else "") for i in top]


def test_ties_in_index_order_counts_beyond_the_classes_and_unbatched_models():
    assert classify(np.array([[1, 3, 3, 0]], np.int32), 9).tolist() == [[b"3.000000:1", b"3.000000:2",
                                                                        b"1.000000:0", b"0.000000:3"]]  # fmt: skip
    unbatched = classify(np.array([0.5, 2.0, 1.0], np.float32), 2, ("a", "b", "c"), batched=False)
    assert unbatched.tolist() == [b"2.000000:1:b", b"1.000000:2:c"]

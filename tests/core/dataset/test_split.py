"""The held-out share against the images there are: how many it holds out, and what is allowed."""

from __future__ import annotations

from studio.core.dataset.split import held_out_count, largest_fraction, split_problem


def test_what_a_share_holds_out_and_the_largest_that_leaves_one_to_train_on() -> None:
    assert [held_out_count(24, f) for f in (0, 0.01, 0.1, 0.5)] == [0, 1, 2, 12]
    assert (largest_fraction(24), largest_fraction(2), largest_fraction(1)) == (0.97, 0.74, 0.0)
    assert split_problem(24, 0.5) is None and split_problem(0, 0.5) is None


def test_one_image_cannot_be_split() -> None:
    assert split_problem(1, 0.1, "data") == (
        "holds out 1 of the 1 training image in data, leaving none to train on; allowed: 0 (one image cannot be "
        "split). Or add images, or name a dataset.validation_folder of other images")

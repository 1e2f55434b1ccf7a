from __future__ import annotations

from studio.core.dataset.buckets import bucket_counts, bucket_for, bucket_sizes


def test_buckets_stay_within_area_and_grid() -> None:
    sizes = bucket_sizes(512, 64, 256, 1024)
    assert (512, 512) in sizes and (768, 320) in sizes and (320, 768) in sizes
    assert all(w * h <= 512 * 512 and w % 64 == 0 and h % 64 == 0 for w, h in sizes)


def test_images_land_in_nearest_aspect_bucket() -> None:
    buckets = bucket_sizes(512)
    assert bucket_for((1000, 1000), buckets) == (512, 512)
    w, h = bucket_for((1920, 1080), buckets)
    assert w > h and abs(w / h - 16 / 9) < 0.25
    counts = bucket_counts([(800, 800), (640, 640), (1080, 1920)], 512)
    assert counts[(512, 512)] == 2 and sum(counts.values()) == 3


def test_limits_off_the_step_grid_still_give_sides_on_it() -> None:
    # min_bucket = 300 and max_bucket = 1000 at a step of 64: an image of 480x500 went to a 492x512 bucket,
    # whose 61.5-cell latent an SD3 or FLUX transformer cannot cut into patches (the step failed).
    for resolution, min_side, max_side in ((512, 300, 2048), (512, 256, 1000), (1024, 300, 1900)):
        sizes = bucket_sizes(resolution, 64, min_side, max_side)
        assert all(w % 64 == 0 and h % 64 == 0 for w, h in sizes), sizes
        assert all(w * h <= resolution * resolution for w, h in sizes)
    assert bucket_for((480, 500), bucket_sizes(512, 64, 300, 2048)) == (512, 512)
    assert (320, 768) in bucket_sizes(512, 64, 300, 1000)  # the grid's sides inside the limits remain

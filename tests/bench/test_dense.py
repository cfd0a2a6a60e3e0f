"""bench.dense's report (CPU): per-band medians, and the tuned table when timed."""

from bench.dense import markdown, summary


def _row(m, ours, cublas, tuned=None, cublas_tuned=None):
    return dict(dtype="bfloat16", model="llama3-8b", layer="o", m=m, n=4096, k=4096, ours_ms=ours, best_ms=ours,
                cublas_ms=cublas, ours_tflops=1.0, cublas_tflops=1.0, chosen="k_128x256x64_w8x1x1_s4",
                best="k_128x256x64_w8x1x1_s4", tuned_ms=tuned, cublas_tuned_ms=cublas_tuned,
                tuned="128x192x64_w8x1x1_s4 k2" if tuned else None)


def test_the_median_of_an_even_count_is_the_mean_of_the_middle_two():
    rows = [_row(1024, 1.0, c) for c in (0.9, 1.2, 1.0, 1.1)]
    assert summary(rows)[0].startswith("- M >= 1024: median cuBLAS/ours 1.050 over 4")


def test_summary_bands_by_m():
    rows = [_row(16, 1.0, 0.9), _row(1024, 1.0, 1.1), _row(4096, 1.0, 0.9), _row(256, 2.0, 1.0)]
    lines = summary(rows)
    assert lines[0].startswith("- M <= 64: median cuBLAS/ours 0.900 over 1")
    assert lines[1].startswith("- M 128-512: median cuBLAS/ours 0.500 over 1")
    assert lines[2] == "- M >= 1024: median cuBLAS/ours 1.000 over 2 problems (min 0.90, max 1.10)"


def test_tuned_table_only_when_timed():
    assert "Tuned dispatch" not in markdown([_row(1024, 1.0, 1.0)], "H200")
    text = markdown([_row(1024, 1.0, 1.0, tuned=0.8, cublas_tuned=0.88)], "H200")
    assert "| bfloat16 | llama3-8b | o | 1024 | 800.0 | 880.0 | 1.10 | 128x192x64_w8x1x1_s4 k2 |" in text
    assert "median cuBLAS/tuned 1.100" in text


def test_the_header_says_when_best_was_not_searched():
    assert "(exhaustive)" in markdown([_row(1024, 1.0, 1.0)], "H200")
    assert "no exhaustive search" in markdown([_row(1024, 1.0, 1.0)], "H200", oracle=False)

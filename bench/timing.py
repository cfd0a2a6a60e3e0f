"""The benchmarks' timing: re-exported from gemm_runtime.timing (the tuner uses the
same code, so benchmark and tuner numbers are comparable)."""

from gemm_runtime.timing import flush_l2, host_us_per_call, interleaved_medians_ms, median_ms

__all__ = ["flush_l2", "host_us_per_call", "interleaved_medians_ms", "median_ms"]

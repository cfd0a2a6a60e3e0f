"""DispatchCache: lookups, thread safety, and the export/import file format (CPU only)."""

from __future__ import annotations

import io
import json
import threading
import warnings

import pytest

from codegen.vocabulary import BOrder, DataType
from gemm_runtime.context import make_key
from gemm_runtime.dispatch_cache import FORMAT, VERSION, DispatchCache, ImportReport
from gemm_runtime.errors import DispatchCacheError, DispatchCacheWarning, GemmArgumentError
from gemm_runtime.plan import LaunchSpec

ARCH = 90
KERNELS = frozenset({"k_small", "k_mid", "k_big"})


def key(m: int, n: int = 4096, k: int = 4096, *, a=DataType.F16, order=BOrder.NK, d=DataType.F16, arch: int = ARCH):
    return make_key(a, order, d, m, n, k, arch=arch)


def populated() -> DispatchCache:
    c = DispatchCache(ARCH, "NVIDIA H200")
    c.put(key(16), LaunchSpec("k_small", splits=4, swizzle=1))
    c.put(key(128), LaunchSpec("k_mid", splits=2))
    c.put(key(1024), LaunchSpec("k_big"))
    c.put(key(64, n=1024, d=DataType.F32), LaunchSpec("k_mid", swizzle=3))
    c.put(key(8, a=DataType.BF16, order=BOrder.KN), LaunchSpec("k_small", splits=8))
    return c


# --- lookups ----------------------------------------------------------------------------------


def test_exact_hit_and_miss():
    c = populated()
    assert len(c) == 5
    assert c.get(key(16)) == LaunchSpec("k_small", 4, 1)
    assert c.get(key(128)) == LaunchSpec("k_mid", 2)
    assert c.get(key(17)) is None
    assert c.get(key(16, n=1024)) is None  # another shape
    assert c.get(key(16, arch=80)) is None


@pytest.mark.parametrize(
    "m, expected",
    [
        (1, "k_small"),  # below all tuned M
        (16, "k_small"),  # exactly at
        (17, "k_mid"),  # between
        (128, "k_mid"),
        (129, "k_big"),
        (1024, "k_big"),
        (1025, None),  # above all
    ],
)
def test_at_or_above(m, expected):
    c = populated()
    got = c.get_at_or_above(key(m))
    assert (got.kernel if got else None) == expected


def test_at_or_above_does_not_mix_shapes():
    c = populated()
    # Same M, different N / d_type / b_order / a_type / k: only their own entries count.
    assert c.get_at_or_above(key(1, n=1024)) is None  # (n=1024, d=f16) has no entry
    assert c.get_at_or_above(key(1, n=1024, d=DataType.F32)) == LaunchSpec("k_mid", swizzle=3)
    assert c.get_at_or_above(key(65, n=1024, d=DataType.F32)) is None
    assert c.get_at_or_above(key(1, order=BOrder.KN)) is None
    assert c.get_at_or_above(key(1, a=DataType.BF16, order=BOrder.KN)) == LaunchSpec("k_small", 8)
    assert c.get_at_or_above(key(1, k=4095)) is None
    assert DispatchCache(ARCH).get_at_or_above(key(1)) is None


def test_put_replace_and_keep():
    c = DispatchCache(ARCH)
    assert c.put(key(32), LaunchSpec("k_small")) is True
    assert c.put(key(32), LaunchSpec("k_mid"), replace=False) is False
    assert c.get(key(32)) == LaunchSpec("k_small")
    assert c.put(key(32), LaunchSpec("k_mid")) is True
    assert c.get(key(32)) == LaunchSpec("k_mid")
    assert c.put(key(48), LaunchSpec("k_big"), replace=False) is True
    assert len(c) == 2
    c.clear()
    assert len(c) == 0 and c.entries() == [] and c.get(key(32)) is None


def test_put_refuses_another_arch_and_wrong_types():
    c = DispatchCache(ARCH)
    with pytest.raises(GemmArgumentError, match="key.arch"):
        c.put(key(1, arch=80), LaunchSpec("k_small"))
    with pytest.raises(GemmArgumentError, match="spec"):
        c.put(key(1), {"kernel": "k_small"})  # type: ignore[arg-type]
    with pytest.raises(GemmArgumentError, match="key"):
        c.put((ARCH, 1), LaunchSpec("k_small"))  # type: ignore[arg-type]
    assert len(c) == 0


def test_entries_sorted_numerically():
    c = DispatchCache(ARCH)
    for m in (1024, 2, 16, 128, 1):
        c.put(key(m), LaunchSpec("k_small"))
    assert [k.m for k, _ in c.entries()] == [1, 2, 16, 128, 1024]


def test_thread_safety_smoke():
    c = DispatchCache(ARCH)
    n_threads, per_thread = 8, 300
    errors: list[BaseException] = []
    start = threading.Barrier(n_threads)

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                m = 1 + (i * 7 + t) % 200
                c.put(key(m, n=64 * (1 + t % 3)), LaunchSpec(f"k{t}", splits=1 + i % 8))
                c.get(key(m, n=64))
                c.get_at_or_above(key(m // 2, n=128))
                if i % 50 == 0:
                    c.entries()
                    len(c)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    entries = c.entries()
    assert len(entries) == len(c) == len({k for k, _ in entries})
    assert len(c) == 3 * 200  # every (n, m) pair was written by someone
    for k, spec in entries:
        assert c.get(k) == spec
        assert c.get_at_or_above(k) == spec
    # Sorted M lists stayed sorted: at-or-above from M-1 lands on the entry at M.
    for k, spec in entries:
        if k.m > 1:
            prev = c.get(k._replace(m=k.m - 1))
            assert c.get_at_or_above(k._replace(m=k.m - 1)) == (prev or spec)


# --- export / import ----------------------------------------------------------------------------


def test_round_trip_path(tmp_path):
    c = populated()
    path = tmp_path / "sub" / "cache.json"
    c.export(path)
    assert not [p for p in path.parent.iterdir() if p.name != "cache.json"]  # no temp files left
    fresh = DispatchCache(ARCH)
    report = fresh.import_(path, KERNELS)
    assert report == ImportReport(added=5, replaced=0, skipped_unknown=0)
    assert fresh.entries() == c.entries()
    # Importing again replaces nothing that differs.
    assert fresh.import_(str(path), KERNELS) == ImportReport(0, 0, 0, unchanged=5)


def test_round_trip_file_objects():
    c = populated()
    text_file = io.StringIO()
    c.export(text_file)
    binary_file = io.BytesIO()
    c.export(binary_file)
    assert binary_file.getvalue().decode() == text_file.getvalue()
    for f in (io.StringIO(text_file.getvalue()), io.BytesIO(binary_file.getvalue())):
        fresh = DispatchCache(ARCH)
        assert fresh.import_(f, KERNELS).added == 5
        assert fresh.entries() == c.entries()


def test_import_replaces_and_merges():
    c = populated()
    other = DispatchCache(ARCH)
    other.put(key(16), LaunchSpec("k_big", splits=2))  # differs from c's entry
    other.put(key(128), LaunchSpec("k_mid", splits=2))  # same as c's entry
    other.put(key(4096), LaunchSpec("k_big"))  # new
    f = io.StringIO()
    other.export(f)
    f.seek(0)
    assert c.import_(f, KERNELS) == ImportReport(added=1, replaced=1, skipped_unknown=0, unchanged=1)
    assert c.get(key(16)) == LaunchSpec("k_big", splits=2)
    assert c.get(key(1024)) == LaunchSpec("k_big")  # untouched
    assert len(c) == 6


def test_export_format_and_determinism(tmp_path):
    c = populated()
    text = c.to_json_text()
    doc = json.loads(text)
    assert doc["format"] == FORMAT and doc["version"] == VERSION == 1
    assert doc["arch"] == ARCH and doc["device"] == "NVIDIA H200"
    assert len(doc["records"]) == 5
    assert doc["records"][0]["key"]["m"] >= 0 and set(doc["records"][0]) == {"key", "launch"}
    assert text.endswith("}\n") and text.startswith('{\n "arch": 90,')
    assert text == json.dumps(doc, indent=1, sort_keys=True) + "\n"
    # Insertion order does not matter.
    backwards = DispatchCache(ARCH, "NVIDIA H200")
    for k, s in reversed(c.entries()):
        backwards.put(k, s)
    assert backwards.to_json_text() == text
    # No pickle: plain ASCII JSON text, no pickle protocol bytes.
    c.export(tmp_path / "c.json")
    raw = (tmp_path / "c.json").read_bytes()
    assert raw == text.encode("ascii")
    assert not raw.startswith(b"\x80") and b"pickle" not in raw


# --- refused imports leave the cache unchanged --------------------------------------------------


def _exported_doc() -> dict:
    return json.loads(populated().to_json_text())


def _refused(tmp_path, content: str | bytes, *reason: str) -> DispatchCacheError:
    path = tmp_path / "bad.json"
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    c = DispatchCache(ARCH)
    c.put(key(2), LaunchSpec("k_small", splits=3))
    c.put(key(999, n=128), LaunchSpec("k_big"))
    before = c.entries()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a refused file warns about nothing
        with pytest.raises(DispatchCacheError) as info:
            c.import_(path, KERNELS)
    assert c.entries() == before
    err = info.value
    assert err.path == str(path)
    assert str(path) in str(err)
    for r in reason:
        assert r in err.reason, err.reason
    assert isinstance(err, ValueError)
    return err


def _with(**changes) -> str:
    doc = _exported_doc()
    doc.update(changes)
    return json.dumps(doc)


def _with_record(index: int, part: str, **changes) -> str:
    doc = _exported_doc()
    doc["records"][index][part].update(changes)
    return json.dumps(doc)


def test_refuse_not_json(tmp_path):
    _refused(tmp_path, "this is not json", "not valid JSON", "line 1 column 1")
    _refused(tmp_path, "", "not valid JSON")
    _refused(tmp_path, b"\xff\xfe\x00garbage", "not UTF-8")


def test_refuse_truncated(tmp_path):
    text = populated().to_json_text()
    err = _refused(tmp_path, text[: len(text) // 2], "not valid JSON", "truncated")
    assert "char" in err.reason


def test_refuse_wrong_format(tmp_path):
    _refused(tmp_path, _with(format="something-else"), "format", "something-else", FORMAT)
    _refused(tmp_path, "[1, 2, 3]", "top level", "JSON array")
    doc = _exported_doc()
    del doc["format"]
    _refused(tmp_path, json.dumps(doc), "format", "None")


def test_refuse_wrong_version(tmp_path):
    _refused(tmp_path, _with(version=2), "version", "2", "newer", "reads version(s) 1")
    _refused(tmp_path, _with(version="1"), "version", "reads version(s) 1")
    _refused(tmp_path, _with(version=0), "version")


def test_refuse_wrong_arch(tmp_path):
    err = _refused(tmp_path, _with(arch=80), "recorded on sm_80", "this GPU is sm_90", "tune again", "made on sm_90")
    assert "sm_80" in str(err)
    _refused(tmp_path, _with(arch="90"), "arch")


def test_refuse_record_arch_differs_from_file(tmp_path):
    _refused(tmp_path, _with_record(2, "key", arch=80), "record 2", "arch 80")


@pytest.mark.parametrize(
    "index, part, changes, reason",
    [
        (1, "launch", {"splits": "x"}, ("record 1", "launch", "splits")),
        (0, "launch", {"splits": 0}, ("record 0", "splits")),
        (3, "launch", {"kernel": 7}, ("record 3", "kernel")),
        (4, "key", {"a_type": "f64"}, ("record 4", "key", "f64")),
        (2, "key", {"n": -1}, ("record 2", "n")),
        (2, "key", {"m": "sixteen"}, ("record 2", "m")),
    ],
)
def test_refuse_malformed_record(tmp_path, index, part, changes, reason):
    _refused(tmp_path, _with_record(index, part, **changes), *reason)


def test_refuse_record_missing_fields(tmp_path):
    doc = _exported_doc()
    del doc["records"][3]["key"]["k"]
    _refused(tmp_path, json.dumps(doc), "record 3", "missing field 'k'")
    doc = _exported_doc()
    del doc["records"][1]["launch"]["kernel"]
    _refused(tmp_path, json.dumps(doc), "record 1", "missing field 'kernel'")
    doc = _exported_doc()
    del doc["records"][0]["launch"]
    _refused(tmp_path, json.dumps(doc), "record 0", "no 'launch'")


def test_refuse_malformed_records_structure(tmp_path):
    _refused(tmp_path, _with(records={"a": 1}), "records", "JSON object", "expected a list")
    doc = _exported_doc()
    del doc["records"]
    _refused(tmp_path, json.dumps(doc), "records", "missing")
    doc = _exported_doc()
    doc["records"][2] = "k_small"
    _refused(tmp_path, json.dumps(doc), "record 2", "expected an object")
    doc = _exported_doc()
    doc["records"][1]["extra"] = 1
    _refused(tmp_path, json.dumps(doc), "record 1", "extra")
    doc = _exported_doc()
    doc["records"][4]["key"] = [1, 2]
    _refused(tmp_path, json.dumps(doc), "record 4", "'key'")


def test_refuse_duplicate_records(tmp_path):
    doc = _exported_doc()
    doc["records"].append(dict(doc["records"][1], launch={"kernel": "k_big", "splits": 1, "swizzle": 0}))
    _refused(tmp_path, json.dumps(doc), "record 5 repeats the key of record 1")


def test_bad_record_late_in_file_applies_nothing(tmp_path):
    # Every record but the last is fine: still nothing is applied.
    _refused(tmp_path, _with_record(4, "launch", swizzle=99), "record 4", "swizzle")


def test_refuse_missing_file(tmp_path):
    c = DispatchCache(ARCH)
    with pytest.raises(DispatchCacheError, match="cannot be read") as info:
        c.import_(tmp_path / "nope.json", KERNELS)
    assert info.value.path == str(tmp_path / "nope.json")


def test_stream_name_in_error():
    with pytest.raises(DispatchCacheError, match="<stream>"):
        DispatchCache(ARCH).import_(io.StringIO("{"), KERNELS)


# --- unknown kernels ---------------------------------------------------------------------------


def test_unknown_kernels_skipped_with_one_warning():
    f = io.StringIO(populated().to_json_text())
    c = DispatchCache(ARCH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = c.import_(f, {"k_mid"})
    ours = [w for w in caught if issubclass(w.category, DispatchCacheWarning)]
    assert len(ours) == 1 and len(caught) == 1
    msg = str(ours[0].message)
    assert "3 of 5 records" in msg and "skipped" in msg and "k_big" in msg and "k_small" in msg
    assert report == ImportReport(added=2, replaced=0, skipped_unknown=3)
    assert {s.kernel for _, s in c.entries()} == {"k_mid"}
    assert issubclass(DispatchCacheWarning, UserWarning)


def test_no_warning_when_all_known():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DispatchCache(ARCH).import_(io.StringIO(populated().to_json_text()), KERNELS)


def test_empty_cache_round_trip():
    text = DispatchCache(ARCH).to_json_text()
    assert json.loads(text)["records"] == []
    c = populated()
    before = c.entries()
    assert c.import_(io.StringIO(text), KERNELS) == ImportReport()
    assert c.entries() == before

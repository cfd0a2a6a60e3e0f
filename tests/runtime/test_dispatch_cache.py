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


def key(m: int, n: int = 4096, k: int = 4096, *, a=DataType.F16, order=BOrder.NK, d=None, arch: int = ARCH):
    return make_key(a, order, d or a, m, n, k, arch=arch)


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
        (0, "launch", {"splits": 1.0}, ("record 0", "splits")),
        (3, "launch", {"kernel": 7}, ("record 3", "kernel")),
        (4, "key", {"a_type": 16}, ("record 4", "key", "a_type")),
        (2, "key", {"n": True}, ("record 2", "n")),
        (2, "key", {"m": "sixteen"}, ("record 2", "m")),
        (1, "key", {"quant": None}, ("record 1", "quant")),
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


@pytest.mark.parametrize(
    "index, part, changes, reason",
    [
        # A typo would otherwise be dropped and the default (1 split) imported in its place.
        (0, "launch", {"split": 4}, ("record 0", "'launch' has unexpected field(s) ['split']", "splits, swizzle")),
        (2, "key", {"group": 128}, ("record 2", "'key' has unexpected field(s) ['group']", "a_type, align")),
    ],
)
def test_refuse_unknown_fields_in_key_or_launch(tmp_path, index, part, changes, reason):
    _refused(tmp_path, _with_record(index, part, **changes), *reason)


@pytest.mark.parametrize("bad", [None, 3, ["cache.json"]])
def test_import_and_export_name_a_bad_path_argument(bad):
    c = populated()
    before = c.entries()
    for call, what in ((lambda: c.import_(bad, KERNELS), "reading"), (lambda: c.export(bad), "writing")):
        with pytest.raises(GemmArgumentError, match=rf"^path: got {type(bad).__name__}; accepted: a path .* {what}"):
            call()
    assert c.entries() == before


def test_import_names_a_file_object_that_reads_no_text():
    class Odd:
        def read(self):
            return 5

    with pytest.raises(GemmArgumentError, match=r"^path: got a Odd whose read\(\) returned a int"):
        DispatchCache(ARCH).import_(Odd(), KERNELS)


def test_refuse_duplicate_records(tmp_path):
    doc = _exported_doc()
    doc["records"].append(dict(doc["records"][1], launch={"kernel": "k_big", "splits": 1, "swizzle": 0}))
    _refused(tmp_path, json.dumps(doc), "record 5 repeats the key of record 1")


def test_bad_record_late_in_file_applies_nothing(tmp_path):
    # Every record but the last is fine: still nothing is applied.
    _refused(tmp_path, _with_record(4, "launch", swizzle="1"), "record 4", "swizzle")


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


def test_refuse_deeply_nested_json(tmp_path):
    _refused(tmp_path, "[" * 200_000 + "]" * 200_000, "nested too deeply")
    doc = _exported_doc()
    text = json.dumps(doc).replace('"records": [', '"records": [' + "[" * 100_000 + "]" * 100_000 + ", ", 1)
    _refused(tmp_path, text, "nested too deeply")


def test_refuse_integer_too_long_to_convert(tmp_path):
    # Python refuses int() of more digits than sys.get_int_max_str_digits() with a bare ValueError.
    text = _with_record(1, "key", m=0).replace('"m": 0', '"m": ' + "7" * 50_000, 1)
    _refused(tmp_path, text, "not a dispatch cache export", "digits")


# --- well-formed records this build cannot use: skipped, counted, one warning ----------------


def _import_warning(text: str, kernels=KERNELS) -> tuple[DispatchCache, ImportReport, str]:
    c = DispatchCache(ARCH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = c.import_(io.StringIO(text), kernels)
    assert len(caught) == 1 and issubclass(caught[0].category, DispatchCacheWarning), [str(w.message) for w in caught]
    return c, report, str(caught[0].message)


@pytest.mark.parametrize(
    "index, part, changes, reason",
    [
        (3, "key", {"align": 3}, "record 3: align 3 is not one of 1, 2, 4, 8"),
        (0, "key", {"align": 0}, "align 0 is not one of"),
        (0, "key", {"align": 2**63}, f"align {2**63} is not one of"),
        (1, "key", {"m": 0}, "m 0 is not in 1..2147483647"),
        (1, "key", {"n": 0}, "n 0 is not in"),
        (1, "key", {"k": 0}, "k 0 is not in"),
        (2, "key", {"n": -1}, "n -1 is not in"),
        (2, "key", {"m": 2**31}, f"m {2**31} is not in"),
        (2, "key", {"epilogue": "banana"}, "epilogue 'banana' is not one of 'none', 'bias'"),
        (2, "key", {"quant": "banana"}, "quant 'banana' is not 'none' or <u4|u8>g<group size>"),
        (2, "key", {"quant": "u4g7777"}, "quant 'u4g7777': group 7777 is not a power of two"),
        (2, "key", {"quant": "u4g128"}, "b_type f16 is not u4"),
        (2, "key", {"quant": "u4g16", "b_type": "u4"}, "group 16 is not a power of two >= 32"),
        (2, "key", {"quant": "u4g8192", "b_type": "u4"}, "nor K itself"),
        (2, "key", {"quant": "u8g64", "b_type": "u8", "b_order": "kn"}, "b_order kn is not nk"),
        (2, "key", {"b_type": "u4"}, "b_type u4 is not f16 (a_type) for quant 'none'"),
        (4, "key", {"a_type": "f32"}, "a_type f32 is not one of f16, bf16"),
        (4, "key", {"a_type": "f64"}, "a_type 'f64' is not one of f16, bf16, f32, u4, u8"),
        (1, "key", {"d_type": "bf16"}, "d_type bf16 is not f16 (a_type) or f32"),
        (1, "key", {"epilogue": "gated_silu", "n": 4095}, "needs an even N"),
        (0, "launch", {"splits": 0}, "record 0: splits 0 is not in 1..64"),
        (0, "launch", {"splits": 65}, "splits 65 is not in 1..64"),
        (0, "launch", {"swizzle": 6}, "swizzle 6 is not in 0..5"),
        (4, "launch", {"swizzle": -1}, "record 4: swizzle -1 is not in 0..5"),
        (4, "launch", {"kernel": ""}, "kernel is an empty name"),
    ],
)
def test_invalid_records_are_skipped_and_counted(index, part, changes, reason):
    c, report, msg = _import_warning(_with_record(index, part, **changes))
    assert report == ImportReport(added=4, skipped_invalid=1)
    assert "1 of 5 records skipped: 1 is invalid (e.g. " in msg and reason in msg, msg
    assert len(c) == 4 and populated().entries()[index] not in c.entries()


def test_valid_quantized_and_epilogue_keys_are_imported():
    doc = _exported_doc()
    doc["records"][1]["key"].update(quant="u4g128", b_type="u4")
    doc["records"][2]["key"].update(quant="u8g4096", b_type="u8", epilogue="bias_gated_silu")  # one group: g = K
    doc["records"][3]["key"].update(align=1, d_type="f32", m=2**31 - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = DispatchCache(ARCH).import_(io.StringIO(json.dumps(doc)), KERNELS)
    assert report == ImportReport(added=5)


def test_one_warning_counts_unknown_kernels_and_invalid_records():
    doc = _exported_doc()
    doc["records"][3]["key"]["align"] = 3
    doc["records"][4]["launch"]["splits"] = 0
    c, report, msg = _import_warning(json.dumps(doc), {"k_mid"})
    # Records 3 and 4 are invalid; of the rest, records 0 and 1 name k_small.
    assert report == ImportReport(added=1, skipped_unknown=2, skipped_invalid=2)
    assert "4 of 5 records skipped: 2 name kernels this build does not have (e.g. k_small)" in msg
    assert "2 are invalid (e.g. record 3: align 3 is not one of 1, 2, 4, 8)" in msg
    assert [s.kernel for _, s in c.entries()] == ["k_mid"]


def test_invalid_records_take_no_part_in_the_duplicate_check():
    doc = _exported_doc()
    doc["records"].append(dict(doc["records"][1], launch={"kernel": "k_big", "splits": 0, "swizzle": 0}))
    _, report, _ = _import_warning(json.dumps(doc))
    assert report == ImportReport(added=5, skipped_invalid=1)


def test_put_refuses_invalid_keys():
    c = DispatchCache(ARCH)
    for bad in (key(0), key(1, k=0), key(1)._replace(align=3), key(1)._replace(quant="u4g7777")):
        with pytest.raises(GemmArgumentError, match=r"^key: got "):
            c.put(bad, LaunchSpec("k_small"))
    assert len(c) == 0


@pytest.mark.parametrize(
    "bad_key, spec, argument",
    [
        (key(64)._replace(m=64.0), LaunchSpec("k_small"), "key.m"),  # validate's range checks took it
        (key(64)._replace(align=True), LaunchSpec("k_small"), "key.align"),
        (key(64)._replace(a_type="f16"), LaunchSpec("k_small"), "key.a_type"),
        (key(64)._replace(quant=None), LaunchSpec("k_small"), "key.quant"),
        (key(64), LaunchSpec("k_small", splits=2.5), "spec.splits"),  # served: 1 <= 2.5 <= 64
        (key(64), LaunchSpec("k_small", swizzle=1.0), "spec.swizzle"),  # served: 1.0 in range(6)
        (key(64), LaunchSpec("k_small", splits="2"), "spec.splits"),
        (key(64), LaunchSpec(["k_small"]), "spec.kernel"),
        (key(64), LaunchSpec("k_small", unpack=1), "spec.unpack"),
    ],
)
def test_put_refuses_fields_of_the_wrong_types(bad_key, spec, argument):
    """What an import refuses as malformed, put refuses too: such an entry was served
    (a swizzle of 1.0 then failed deep inside the launch) and exported into a file this
    cache's own import refuses."""
    c = DispatchCache(ARCH)
    with pytest.raises(GemmArgumentError) as info:
        c.put(bad_key, spec)
    assert info.value.argument == argument
    assert len(c) == 0


def test_put_takes_numpy_integers_as_ints_and_exports_them():
    np = pytest.importorskip("numpy")
    c = DispatchCache(ARCH)
    c.put(key(64)._replace(m=np.int64(64), n=np.int32(4096)), LaunchSpec("k_small", splits=np.int64(2)))
    (stored_key, stored), = c.entries()
    assert type(stored_key.m) is int and type(stored_key.n) is int and type(stored.splits) is int
    again = DispatchCache(ARCH)
    again.import_(io.StringIO(c.to_json_text()), KERNELS)  # export raised TypeError (int64 is not JSON)
    assert again.get(key(64)) == LaunchSpec("k_small", splits=2)


# --- with the build's specs: a record whose kernel cannot serve its key is invalid -----------


def test_records_whose_kernel_cannot_serve_their_key_are_skipped():
    from tests.helpers import spec_for

    f16_nk8 = spec_for()  # f16, N x K, align 8
    thin = spec_for(cta=(16, 64, 128), warps=(1, 2, 2))
    c = DispatchCache(ARCH)
    c.put(key(16), LaunchSpec("f16_nk8", splits=2, swizzle=1))  # fine
    c.put(make_key(DataType.BF16, BOrder.KN, DataType.BF16, 16, 4096, 4096, align=2, arch=ARCH), LaunchSpec("f16_nk8"))
    c.put(key(2**31 - 1), LaunchSpec("thin", swizzle=5))  # 2**27 M tiles x 32: past gridDim.x
    c.put(key(2**31 - 1, n=1024), LaunchSpec("thin", swizzle=3))  # fine
    _, report, msg = _import_warning(c.to_json_text(), {"f16_nk8": f16_nk8, "thin": thin})
    assert report == ImportReport(added=2, skipped_invalid=2)
    assert "2 of 4 records skipped: 2 are invalid (e.g. record 0: kernel: got f16_nk8; accepted: a kernel that" in msg
    assert "operand type is not bf16" in msg

"""gemm_runtime.build_manifest: publication under the arch lock, reading, verification."""

from __future__ import annotations

import json
import threading

import pytest

from gemm_runtime import build_manifest as bm
from tests.helpers import build_dir_problems, spec_for

SPECS = [spec_for(family=f"f{i}", cta=(64, 64, 32), stages=3) for i in range(6)]


def _record(spec) -> dict:
    return {
        "name": spec.name, "symbol": spec.name, "cubin": f"{spec.name}.cubin", "source": "x.yaml",
        "spec": spec.to_json(), "registers": 32, "stack_frame": 0, "spill_stores": 0, "spill_loads": 0,
        "smem_static": 0, "smem_dynamic": spec.smem_bytes, "threads": spec.threads,
    }  # fmt: skip


def _publish(arch_dir, specs, tag: bytes = b"") -> bm.PublishResult:
    cubins = {s.name: b"\x7fELF" + s.name.encode() + tag * 1000 for s in specs}
    return bm.publish(arch_dir, 80, "13.5", [_record(s) for s in specs], cubins, [])


def test_publish_then_read_verified(tmp_path):
    arch_dir = tmp_path / "sm_80"
    assert _publish(arch_dir, SPECS[:2]).restored == ()
    manifest, cubins, problems = bm.read_verified(arch_dir / bm.MANIFEST, 80)
    assert [r.name for r in manifest.records] == [s.name for s in SPECS[:2]] and problems == []
    assert set(cubins) == {s.name for s in SPECS[:2]}
    # The next set replaces the previous one: its stale cubins go.
    _publish(arch_dir, SPECS[2:3])
    assert sorted(p.name for p in arch_dir.glob("*.cubin")) == [f"{SPECS[2].name}.cubin"]


def test_missing_and_damaged_entries_are_named_and_restored(tmp_path):
    arch_dir = tmp_path / "sm_80"
    _publish(arch_dir, SPECS[:3])
    (arch_dir / f"{SPECS[0].name}.cubin").unlink()
    data = (arch_dir / f"{SPECS[1].name}.cubin").read_bytes()
    (arch_dir / f"{SPECS[1].name}.cubin").write_bytes(data[:10])  # truncated
    flipped = bytearray((arch_dir / f"{SPECS[2].name}.cubin").read_bytes())
    flipped[-1] ^= 1
    (arch_dir / f"{SPECS[2].name}.cubin").write_bytes(bytes(flipped))  # same size, other content

    problems = bm.verify(bm.read_manifest(arch_dir / bm.MANIFEST, 80))
    assert [(p.name, p.kind) for p in problems] == [
        (SPECS[0].name, "missing"), (SPECS[1].name, "damaged"), (SPECS[2].name, "damaged"),
    ]  # fmt: skip
    assert "truncated" in problems[1].detail and "sha256" in problems[2].detail
    assert all(str(arch_dir / bm.MANIFEST) in p.describe() and "make build" in p.describe() for p in problems)

    assert _publish(arch_dir, SPECS[:3]).restored == tuple(sorted(s.name for s in SPECS[:3]))
    assert build_dir_problems(tmp_path) == []


@pytest.mark.parametrize(("field", "delta"), [("smem_dynamic", 16 * 64 * 3), ("threads", 32)])
def test_a_record_built_for_another_launch_is_stale(tmp_path, field, delta):
    # A cubin of the same spec built by a version that laid its shared tiles out otherwise
    # (e.g. padded 64-byte rows: 16 bytes more a row) would run with the wrong amount.
    arch_dir = tmp_path / "sm_80"
    records = [_record(s) for s in SPECS[:2]]
    records[1][field] += delta
    cubins = {s.name: b"\x7fELF" + s.name.encode() for s in SPECS[:2]}
    bm.publish(arch_dir, 80, "13.5", records, cubins, [])
    manifest, good, problems = bm.read_verified(arch_dir / bm.MANIFEST, 80)
    assert list(good) == [SPECS[0].name]
    assert [(p.name, p.kind) for p in problems] == [(SPECS[1].name, "stale")]
    built, now = records[1][field], getattr(SPECS[1], "smem_bytes" if field == "smem_dynamic" else "threads")
    assert f"{built} " in problems[0].detail and f"{now}" in problems[0].detail
    assert "another version" in problems[0].describe() and "make build" in problems[0].describe()
    assert bm.verify(manifest) == problems


@pytest.mark.parametrize(
    ("change", "entry", "field"),
    [
        (lambda r: r.update(registers="lots"), "kernels[0] (", "registers"),
        (lambda r: r.update(registers=None), "kernels[0] (", "registers"),
        (lambda r: r.update(sha256=None), "kernels[0] (", "sha256"),
        (lambda r: r.update(spec={"family": "x"}), "kernels[0] (", "spec"),
        (lambda r: r.update(cubin="../x.cubin"), "kernels[0] (", "cubin"),
        (lambda r: r.update(cubin="x\0.cubin"), "kernels[0] (", "cubin"),
        # Spellings that render the same kernel name (so the name check passes) but are
        # not the integers and booleans a spec holds: refused here, not by a TypeError
        # from the first comparison in the registry or `list`.
        (lambda r: r["spec"].update(stages="3"), "kernels[0] (", "spec"),
        (lambda r: r["spec"].update(arch_min="80"), "kernels[0] (", "spec"),
        (lambda r: r["spec"].update(cluster="1"), "kernels[0] (", "spec"),
        (lambda r: r["spec"].update(cta=[64.5, 64, 32]), "kernels[0] (", "spec"),
        (lambda r: r["spec"].update(grouped=""), "kernels[0] (", "spec"),
    ],
)
def test_malformed_record_names_manifest_entry_and_field(tmp_path, change, entry, field):
    arch_dir = tmp_path / "sm_80"
    _publish(arch_dir, SPECS[:1])
    path = arch_dir / bm.MANIFEST
    data = json.loads(path.read_text())
    change(data["kernels"][0])
    path.write_text(json.dumps(data))
    with pytest.raises(bm.ManifestError) as info:
        bm.read_manifest(path, 80)
    e = info.value
    assert (e.path, e.field) == (path, field) and e.entry.startswith(entry)
    assert str(path) in str(e) and f"field {field!r}" in str(e) and "make build" in str(e)


@pytest.mark.parametrize("record", ["a string", None, 7])
def test_a_record_that_is_not_a_mapping(tmp_path, record):
    path = tmp_path / "sm_80" / bm.MANIFEST
    path.parent.mkdir()
    path.write_text(json.dumps({"version": bm.ARCH_MANIFEST_VERSION, "arch": 80, "kernels": [record]}))
    with pytest.raises(bm.ManifestError, match=r"kernels\[0\]: got .*accepted: a mapping"):
        bm.read_manifest(path, 80)


def test_a_manifest_of_another_arch_is_refused(tmp_path):
    # e.g. sm_80/manifest.json copied into sm_90/: its cubins would not load on sm_90.
    _publish(tmp_path / "sm_80", SPECS[:1])
    (tmp_path / "sm_90").mkdir()
    path = tmp_path / "sm_90" / bm.MANIFEST
    path.write_text((tmp_path / "sm_80" / bm.MANIFEST).read_text())
    with pytest.raises(bm.ManifestError, match="field 'arch': got 80, accepted: 90.*make build") as info:
        bm.read_manifest(path, 90)
    assert (info.value.path, info.value.field) == (path, "arch")


def test_arch_dirs_are_the_names_the_build_writes(tmp_path):
    # int("²") raises, and the registry reads build_dir/sm_{arch} back: sm_080 would be
    # listed as sm_80 by `list` while Gemm() looked for sm_80/.
    for name in ("sm_80", "sm_080", "sm_\u00b2", "sm_\u0668\u0660", "sm_90a"):
        (tmp_path / name).mkdir()
        (tmp_path / name / bm.MANIFEST).write_text("{}")
    assert bm.arch_dirs(tmp_path) == [(80, tmp_path / "sm_80" / bm.MANIFEST)]


def test_older_manifest_version_says_rebuild(tmp_path):
    path = tmp_path / "sm_80" / bm.MANIFEST
    path.parent.mkdir()
    path.write_text(json.dumps({"version": 1, "arch": 80, "kernels": []}))
    with pytest.raises(bm.ManifestError, match="field 'version': got 1, accepted: 2.*make build"):
        bm.read_manifest(path, 80)


def test_concurrent_publications_leave_the_directory_consistent(tmp_path):
    """Publishers of different sets race on one arch directory, with readers alongside:
    every state any reader sees, and the final one, is one whole set."""
    arch_dir = tmp_path / "sm_80"
    sets = [SPECS[:3], SPECS[2:], SPECS[1:5]]
    seen_problems: list[str] = []
    errors: list[BaseException] = []

    def publisher(i: int) -> None:
        try:
            for n in range(25):
                _publish(arch_dir, sets[i], tag=bytes([n % 3]))
        except BaseException as e:  # surfaced below
            errors.append(e)

    def reader() -> None:
        try:
            for _ in range(50):
                if (arch_dir / bm.MANIFEST).exists():
                    manifest, _, problems = bm.read_verified(arch_dir / bm.MANIFEST, 80)
                    seen_problems.extend(p.describe() for p in problems)
                    assert {r.name for r in manifest.records} in [{s.name for s in x} for x in sets]
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=publisher, args=(i,)) for i in range(3)] + [
        threading.Thread(target=reader) for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and seen_problems == []
    assert build_dir_problems(tmp_path) == []
    final = {r.name for r in bm.read_manifest(arch_dir / bm.MANIFEST, 80).records}
    assert final in [{s.name for s in x} for x in sets]
    assert {p.stem for p in arch_dir.glob("*.cubin")} == final

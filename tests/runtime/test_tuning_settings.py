"""The GEMM_TUNE grammar (settings.parse_tune) and its place in Settings (CPU only)."""

from __future__ import annotations

import pytest

from gemm_runtime import settings as settings_mod
from gemm_runtime.errors import TuneSettingsError
from gemm_runtime.settings import DEFAULT_SEQ, TuneSettings, parse_tune, tuning_seq

DEFAULT_M = (
    list(range(1, 16)) + list(range(16, 128, 16)) + list(range(128, 1024, 128)) + list(range(1024, 8193, 1024))
)


def test_defaults():
    t = parse_tune("")
    assert t == TuneSettings()
    assert list(t.seq) == DEFAULT_M == list(DEFAULT_SEQ)
    assert (t.max_splits, t.top_k, t.max_time, t.reps, t.confirm) == (8, 8, 0.5, 10, 3)
    assert t.seq[0] == 1 and t.seq[-1] == 8192
    assert parse_tune("  ;  ; ") == TuneSettings()


def test_example_string():
    t = parse_tune("seq=1-16-1,16-128-16,8192;max_splits=8;top_k=8;max_time=1.0")
    assert list(t.seq) == list(range(1, 16)) + list(range(16, 128, 16)) + [8192]
    assert (t.max_splits, t.top_k, t.max_time, t.reps) == (8, 8, 1.0, 10)


def test_all_names_and_partial():
    t = parse_tune("reps=3;max_time=2;top_k=1;max_splits=64;seq=7;confirm=0")
    assert t == TuneSettings(seq=(7,), max_splits=64, top_k=1, max_time=2.0, reps=3, confirm=0)
    assert isinstance(t.max_time, float)
    assert parse_tune("top_k=4") == TuneSettings(top_k=4)  # the rest stay default
    assert parse_tune("max_time=1e-1").max_time == 0.1


def test_whitespace_tolerated():
    t = parse_tune("  seq = 1 - 4 - 1 ,  32 ;\tmax_splits = 4 ;  max_time= 0.25 ;\n")
    assert t.seq == (1, 2, 3, 32) and t.max_splits == 4 and t.max_time == 0.25


def test_seq_sorted_and_deduplicated():
    assert parse_tune("seq=64,1,16,1-4-1,2,64").seq == (1, 2, 3, 16, 64)
    assert parse_tune("seq=10-40-10,20-31-5").seq == (10, 20, 25, 30)
    assert parse_tune("seq=5-6-100").seq == (5,)  # step beyond end: just start
    assert TuneSettings(seq=(9, 3, 3)).seq == (3, 9)  # direct construction normalizes too


@pytest.mark.parametrize(
    "text, fragments",
    [
        ("bogus=1", ("unknown name 'bogus'", "seq, max_splits, top_k, max_time, reps")),
        ("top_k=2;top_k=3", ("top_k=3", "second time", "at most once")),
        ("seq", ("no '='",)),
        ("seq=", ("seq=", "nothing")),
        ("seq= ", ("nothing",)),
        ("seq=1,,2", ("empty item",)),
        ("seq=0", ("M in 1..",)),
        ("seq=-3", ("-3", "start-end-step")),
        ("seq=1.5", ("1.5",)),
        ("seq=abc", ("abc",)),
        ("seq=16-1-1", ("16-1-1", "start < end")),
        ("seq=4-4-1", ("4-4-1", "start < end")),
        ("seq=1-16-0", ("1-16-0", "step >= 1")),
        ("seq=0-16-1", ("0-16-1", "1 <= start")),
        ("seq=1-16", ("1-16",)),
        ("seq=1-16-1-2", ("1-16-1-2",)),
        ("seq=1-100000-1", ("99999 values", "at most 4096")),
        ("max_splits=0", ("max_splits=0", "1..64")),
        ("max_splits=65", ("'65'", "1..64")),
        ("max_splits=two", ("'two'",)),
        ("max_splits=2.0", ("'2.0'",)),
        ("top_k=0", ("top_k=0", ">= 1")),
        ("top_k=-1", ("'-1'",)),
        ("reps=0", ("reps=0", ">= 1")),
        ("confirm=-1", ("'-1'", ">= 0")),
        ("confirm=two", ("'two'",)),
        ("reps=", ("reps=", "''")),
        ("max_time=0", ("max_time=0", "> 0")),
        ("max_time=-1", ("'-1'",)),
        ("max_time=fast", ("'fast'",)),
        ("max_time=inf", ("'inf'",)),
        ("max_time=nan", ("'nan'",)),
    ],
)
def test_errors(text, fragments):
    with pytest.raises(ValueError) as info:
        parse_tune(text)
    err = info.value
    assert isinstance(err, TuneSettingsError)
    msg = str(err)
    assert msg.startswith("GEMM_TUNE: item ")
    assert "accepted:" in msg and "got" in msg
    for f in fragments:
        assert f in msg, msg


def test_error_fields_and_source():
    with pytest.raises(TuneSettingsError) as info:
        parse_tune("max_splits=99", source="--tune")
    e = info.value
    assert (e.source, e.item, e.given, e.accepted) == ("--tune", "max_splits=99", "'99'", "an integer in 1..64")
    assert str(e).startswith("--tune: ")


@pytest.mark.parametrize(
    "changes",
    [dict(seq=()), dict(seq=(0,)), dict(max_splits=65), dict(top_k=0), dict(reps=True), dict(max_time=0.0),
     dict(confirm=-1), dict(confirm=2.0)],
)
def test_direct_construction_validated(changes):
    with pytest.raises(ValueError):
        TuneSettings(**changes)


def test_from_env(monkeypatch):
    monkeypatch.setenv("GEMM_TUNE", "seq=3,1;reps=2")
    s = settings_mod.from_env()
    assert s.tune == TuneSettings(seq=(1, 3), reps=2)
    monkeypatch.delenv("GEMM_TUNE")
    assert settings_mod.from_env().tune == TuneSettings()
    monkeypatch.setenv("GEMM_TUNE", "seq=x")
    with pytest.raises(ValueError, match="GEMM_TUNE"):
        settings_mod.from_env()


def test_override_and_tuning_seq():
    with settings_mod.override(tune=parse_tune("seq=1-64-16,7")):
        assert tuning_seq() == [1, 7, 17, 33, 49]
        assert settings_mod.settings().tune.max_splits == 8
    assert tuning_seq() == list(settings_mod.settings().tune.seq)
    assert isinstance(tuning_seq(), list)


@pytest.mark.parametrize(
    "text",
    ["top_k=" + "9" * 5000, "confirm=" + "9" * 5000, "seq=" + "9" * 5000, "seq=1-" + "9" * 5000 + "-1",
     "seq=" + "9" * 5000 + "-1-1", "seq=1-16-" + "9" * 5000],
)
def test_numbers_longer_than_int_converts_name_the_item(text):
    # int() refuses more than sys.get_int_max_str_digits() digits with a ValueError naming nothing.
    with pytest.raises(TuneSettingsError, match=r"^GEMM_TUNE: item '(top_k|confirm|seq)="):
        parse_tune(text)


def test_a_mib_limit_longer_than_int_converts_names_the_variable(monkeypatch):
    monkeypatch.setenv("GEMM_UNPACK_MAX_MIB", "9" * 5000)
    with pytest.raises(ValueError, match=r"^GEMM_UNPACK_MAX_MIB='9+': expected an integer >= 0"):
        settings_mod.from_env()
    monkeypatch.setenv("GEMM_UNPACK_MAX_MIB", "9" * 30)  # long, but converts: accepted as given
    assert settings_mod.from_env().unpack_max_mib == int("9" * 30)

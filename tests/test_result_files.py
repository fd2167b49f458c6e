"""The result files outside the cells: a section written keeps the others, a section or kind that is
not declared is refused with the valid names, and a file of another kind is not read as this one."""

import json

import pytest

from mtad.result_files import BENCH, CLAIMS, DRAFT, KINDS, ResultFileError, read_file, read_section, write_section


def test_sections_are_written_beside_each_other_in_declared_order(tmp_path):
    write_section(BENCH, tmp_path, "profile", {"rows": [1]})
    write_section(BENCH, tmp_path, "timings", {"rows": [2]})
    write_section(BENCH, tmp_path, "profile", {"rows": [3]})  # rewritten, the other kept
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data == {"kind": "bench", "sections": {"timings": {"rows": [2]}, "profile": {"rows": [3]}}}
    assert read_section(BENCH, tmp_path, "profile") == {"rows": [3]}
    assert read_section(BENCH, tmp_path, "target_distance") is None
    assert read_file(DRAFT, tmp_path) == {}  # absent file
    write_section(CLAIMS, tmp_path, "claims", {"pair": "other"}, stem="claims_other")  # a second of a kind
    assert read_section(CLAIMS, tmp_path, "claims", stem="claims_other") == {"pair": "other"}
    assert read_section(CLAIMS, tmp_path, "claims") is None


def test_unknown_sections_list_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="valid: timings, profile, profile_adaptive, target_distance"):
        write_section(BENCH, tmp_path, "profiles", {})
    with pytest.raises(ValueError, match="valid: measurement"):
        read_section(DRAFT, tmp_path, "measure")
    with pytest.raises(TypeError):
        write_section(CLAIMS, tmp_path, "claims", [1, 2])


def test_a_file_of_another_kind_or_layout_is_refused(tmp_path):
    (tmp_path / "claims.json").write_text(json.dumps({"kind": "bench", "sections": {}}))
    with pytest.raises(ResultFileError, match="not a claims result file"):
        read_section(CLAIMS, tmp_path, "claims")
    (tmp_path / "bench.json").write_text(json.dumps({"rows": []}))  # a payload without its envelope
    with pytest.raises(ResultFileError, match="not a bench result file"):
        read_file(BENCH, tmp_path)
    (tmp_path / "draft.json").write_text(json.dumps({"kind": "draft", "sections": {"measure": {}}}))
    with pytest.raises(ResultFileError, match="unknown sections"):
        read_file(DRAFT, tmp_path)


def test_there_are_three_kinds():
    assert sorted(KINDS) == ["bench", "claims", "draft"]

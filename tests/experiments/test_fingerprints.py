"""lab/diagnostics/fingerprints.py: the before/after record of a restructuring that must change no result. The
same code checks bit for bit against its own record; a record one bit off is named; a record is never overwritten."""

import json

from tests.helpers.script_loader import load_script

ARGS = [
    "--tasks",
    "square",
    "--rounds",
    "8",
    "--seeds",
    "2",
    "--only",
    "NDB-TS",
    "self_duel_test=none",
]  # an entry by its name


def test_fingerprints_check_bit_for_bit_and_name_what_changed(tmp_path, capsys):
    fp = load_script("diagnostics/fingerprints")
    record = tmp_path / "before.json"
    assert fp.main(["--write", str(record), *ARGS]) == 0
    data = json.loads(record.read_text())
    assert set(data["entries"]) == {
        "square/NDB-TS",
        "square/NDB-TS-literal",
        "square/NVLDB-UCB-ASYM+self_duel_test=none",
    }
    assert fp.main(["--check", str(record), *ARGS]) == 0
    assert "3 of 3 bit for bit" in capsys.readouterr().out
    seed = data["entries"]["square/NDB-TS"]["seeds"][1]
    seed["cum_avg_regret"] = float.fromhex(seed["cum_avg_regret"]).__add__(1e-12).hex()  # one rounding away
    record.write_text(json.dumps(data))
    assert fp.main(["--check", str(record), *ARGS]) == 1
    assert "square/NDB-TS: per-seed results differ" in capsys.readouterr().out
    assert fp.main(["--write", str(record), *ARGS]) == 2  # never overwritten
    assert fp.main(["--check", str(record), *ARGS[:4], "--seeds", "3"]) == 2  # other settings than the record's
    assert "was made with {'rounds': 8, 'seeds': 2}" in capsys.readouterr().err

"""scripts/duel.py: the interactive session, its file mode and a simulated person."""

import io
import os
import re

import numpy as np

from nvldb_pl.live import DuelingBandit
from tests.helpers.script_loader import load_script

duel = load_script("duel")


def _run(argv, stdin=""):
    out = io.StringIO()
    code = duel.main(argv, stdin=io.StringIO(stdin), out=out)
    return code, out.getvalue()


def _ranking(text):
    return re.findall(r"^\s+\d+\. (\w+)", text.split("Learned ranking")[1], flags=re.M)


def test_a_simulated_person_is_learned():
    """20 answers from a hidden linear taste: the learned ranking agrees with it (Kendall tau)."""
    code, text = _run(["--simulate", "--questions", "20"])
    assert code == 0 and text.count("Question ") == 20
    tau = float(re.search(r"hidden taste: (-?[\d.]+)", text).group(1))
    names, raw, contexts = duel.catalog()
    assert tau >= 0.6  # 0.85 measured; a learner that learned nothing scores about 0
    assert sorted(_ranking(text)) == sorted(names)


def test_answers_from_a_file_save_and_go_on(tmp_path):
    answers = tmp_path / "a.txt"
    answers.write_text("# my answers\n1\n2\n\n1  # the third\n")
    saved = str(tmp_path / "me.pt")
    code, text = _run(["--answers", str(answers), "--questions", "10", "--save", saved])
    assert code == 0 and text.count("Question ") == 4  # three answered, the fourth finds the file ended
    assert re.findall(r"answer: (\d)", text) == ["1", "2", "1"]
    assert DuelingBandit.from_checkpoint(saved).num_observed == 3
    more = tmp_path / "b.txt"
    more.write_text("2\n2\nq\n1\n")
    code, text = _run(["--answers", str(more), "--load", saved, "--save", saved])
    assert code == 0 and "after 5 answers" in text
    assert DuelingBandit.from_checkpoint(saved).num_observed == 5


def test_interactive_reprompts_and_stops_at_end_of_input():
    code, text = _run(["--questions", "5"], stdin="x\n1\n2\n")
    assert code == 0
    assert "please type 1, 2 or q, not 'x'" in text
    assert "after 2 answers" in text


def test_ctrl_c_stops_like_q_and_the_answers_are_saved(tmp_path):
    class Interrupted(io.StringIO):  # a person who answers twice, then presses Ctrl-C
        def readline(self, *args):
            line = super().readline(*args)
            if not line:
                raise KeyboardInterrupt
            return line

    saved = str(tmp_path / "me.pt")
    out = io.StringIO()
    assert duel.main(["--questions", "5", "--save", saved], stdin=Interrupted("1\n2\n"), out=out) == 0
    assert "after 2 answers" in out.getvalue()
    assert DuelingBandit.from_checkpoint(saved).num_observed == 2


def test_a_full_disk_at_the_save_keeps_the_answers_to_give_again(tmp_path, capsys, monkeypatch):
    """The save at the end fails (ENOSPC): one error line naming the file, exit 1, and the session's answers
    printed; given again from a file, they make the same learner."""
    import errno

    from nvldb_pl.machinery.host import CannotWrite, atomic_open

    saved, real_save = str(tmp_path / "me.pt"), DuelingBandit.save

    def disk_full(self, path):
        with atomic_open(path, "wb") as fh:
            fh.write(b"part of it")
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(DuelingBandit, "save", disk_full)
    code, text = _run(["--questions", "4", "--save", saved], stdin="1\n2\n2\n1\n")
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"error: {saved}: cannot be written (No space left on device)")
    assert err.rstrip().endswith("(one a line, the same --seed): 1 2 2 1") and not os.path.exists(saved)
    monkeypatch.setattr(DuelingBandit, "save", real_save)
    replay = tmp_path / "answers.txt"
    replay.write_text("\n".join(err.rsplit(": ", 1)[1].split()) + "\n")
    again, text_again = _run(["--questions", "4", "--answers", str(replay), "--save", saved])
    ranking = text.split("Learned ranking")[1]  # names and estimated utilities
    assert again == 0 and text_again.split("Learned ranking")[1] == f"{ranking}saved the learner to {saved}\n"
    assert DuelingBandit.from_checkpoint(saved).num_observed == 4
    assert isinstance(CannotWrite(saved, OSError(errno.ENOSPC, "x")), OSError)


def test_a_save_path_that_cannot_be_written_is_refused_before_any_question(tmp_path, capsys):
    code, text = _run(["--questions", "5", "--save", str(tmp_path / "absent" / "me.pt")], stdin="1\n")
    assert code == 2 and "Question" not in text
    assert (
        f"--save: {tmp_path / 'absent' / 'me.pt'}: folder {tmp_path / 'absent'} does not exist"
        in capsys.readouterr().err
    )
    code, text = _run(["--questions", "5", "--save", str(tmp_path)], stdin="1\n")  # a folder, not a file
    assert code == 2 and "Question" not in text
    assert f"--save: {tmp_path} is a folder; give a file name in it" in capsys.readouterr().err


def test_saving_a_live_bandit_to_a_folder_is_refused_naming_it(tmp_path):
    import pytest

    bandit = DuelingBandit.create(dim=5, horizon=10)
    with pytest.raises(IsADirectoryError, match=f"{tmp_path}: a folder; give a file name in it"):
        bandit.save(str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_bad_input_is_named(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("1\nyes\n")
    assert _run(["--answers", str(bad)])[0] == 2
    assert f"{bad} line 2: expected 1, 2 or q, got 'yes'" in capsys.readouterr().err
    assert _run(["--answers", str(tmp_path / "none.txt")])[0] == 2
    assert "no such file" in capsys.readouterr().err
    assert _run(["--answers", str(tmp_path)])[0] == 2
    assert f"--answers: {tmp_path} is a folder; give a text file of answers" in capsys.readouterr().err
    binary = tmp_path / "answers.bin"
    binary.write_bytes(b"\xff\xfe1\n")
    assert _run(["--answers", str(binary)])[0] == 2
    assert f"--answers: {binary} is not a UTF-8 text file (invalid start byte at byte 0)" in capsys.readouterr().err
    typo = tmp_path / "typo.yaml"
    typo.write_text("modle:\n  width: 8\n")
    assert _run(["--config", str(typo)])[0] == 2
    assert f"{typo}: no section(s) ['modle']" in capsys.readouterr().err
    assert _run(["--offer", "1"])[0] == 2
    assert "--offer: must be between 2 and 12" in capsys.readouterr().err
    assert _run(["--seed", "-1"])[0] == 2  # was refused as configs/live.yaml's error
    assert "error: --seed: must be >= 0, got -1" in capsys.readouterr().err
    other = DuelingBandit.create("NVLDB", dim=3, horizon=5)
    other.save(str(tmp_path / "d3.pt"))
    assert _run(["--load", str(tmp_path / "d3.pt")])[0] == 2
    assert "has dim 3" in capsys.readouterr().err


def test_kendall_tau_reference():
    a = np.array([3.0, 1.0, 2.0])
    assert duel.kendall_tau(a, a) == 1.0 and duel.kendall_tau(a, -a) == -1.0
    assert abs(duel.kendall_tau(a, np.array([1.0, 2.0, 3.0])) - (-1 / 3)) < 1e-12


def test_file_options_take_a_tilde_after_an_equals_sign_as_the_home_folder(tmp_path, monkeypatch):
    """``--save=~/me.pt`` (no shell expands ``~`` after ``=``) wrote a file under a folder named ``~``."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("1\n2\n")
    code, _ = _run(["--answers=~/a.txt", "--questions", "2", "--save=~/me.pt"])
    assert code == 0 and DuelingBandit.from_checkpoint(str(tmp_path / "me.pt")).num_observed == 2
    (tmp_path / "b.txt").write_text("1\n")
    code, text = _run(["--answers=~/b.txt", "--load=~/me.pt", "--questions", "1"])
    assert code == 0 and "after 3 answers" in text
    assert not (tmp_path / "~").exists()


def test_a_second_session_on_one_save_is_refused_naming_the_first(tmp_path, capsys):
    """Two sessions on one --save interleaved one answers journal; the second is refused in one line."""
    from nvldb_pl.serve.db_files import hold

    save = str(tmp_path / "me.pt")
    first = hold(f"{save}.lock", "held {holder}")  # as another session holds it
    try:
        code, _ = _run(["--simulate", "--questions", "2", "--save", save])
    finally:
        first.close()
    err = capsys.readouterr().err
    assert code == 2 and f"error: --save: {save} is in use by another session (pid {os.getpid()} on " in err
    assert not os.path.exists(save) and not os.path.exists(save + ".answers")
    assert _run(["--simulate", "--questions", "2", "--save", save])[0] == 0  # released: the next one goes on


def test_the_journal_given_back_with_the_same_save_is_not_appended_to(tmp_path):
    """The documented recovery, --answers ME.pt.answers --save ME.pt, appended the answers it replayed to the file it
    read (a later recovery would have given them twice): the journal read is kept aside, a new one written, and the
    learner is the first session's."""
    save = str(tmp_path / "me.pt")
    assert _run(["--simulate", "--questions", "5", "--save", save])[0] == 0
    first = DuelingBandit.from_checkpoint(save)
    journal = save + ".answers"
    answers = [line for line in open(journal) if not line.startswith("#")]
    code, text = _run(["--answers", journal, "--save", save])
    assert code == 0 and f"it is kept as {journal}.1" in text
    assert [line for line in open(journal) if not line.startswith("#")] == answers  # once, not twice
    assert [line for line in open(journal + ".1") if not line.startswith("#")] == answers
    names, raw, contexts = duel.catalog()
    assert np.array_equal(DuelingBandit.from_checkpoint(save).scores(contexts), first.scores(contexts))


def _state(path):
    return DuelingBandit.from_checkpoint(path).learner.state_dict()


def _same(a, b) -> bool:
    return a.keys() == b.keys() and all(
        not hasattr(v, "shape") or (v.shape == b[k].shape and bool((v == b[k]).all())) for k, v in a.items()
    )


def test_a_journal_replays_to_the_same_learner_only_under_its_own_settings(tmp_path, capsys):
    """The journal recorded --seed and --load only: recovered with the documented command, a session of --catalog
    train, --objective rank or --offer 3 rebuilt another learner without a word. Its header now records them; a replay
    under them gives the same learner bit for bit, one under others is refused naming the setting."""
    save, again = str(tmp_path / "me.pt"), str(tmp_path / "again.pt")
    given = ["--catalog", "train", "--objective", "rank", "--seed", "3"]
    assert _run(["--simulate", "--questions", "6", "--save", save, *given])[0] == 0
    journal = save + ".answers"
    assert '"catalog": "train"' in open(journal).read() and '"objective": "rank"' in open(journal).read()
    assert _run(["--answers", journal, "--save", again, *given])[0] == 0
    assert _same(_state(save), _state(again))
    for other, said in (
        (["--catalog", "train", "--objective", "rank"], "was given with seed 3 (this call: 0)"),
        (["--seed", "3", "--objective", "rank"], "was given with catalog 'train' (this call: 'builtin')"),
        (["--seed", "3", "--catalog", "train"], "was given with objective 'rank' (this call: 'regret')"),
    ):
        code, _ = _run(["--answers", journal, *other])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith(f"error: --answers: {journal} {said}") and err.count("\n") == 1, err


def test_a_journal_without_its_session_line_is_refused_and_a_plain_answers_file_is_said_to_record_none(
    tmp_path, capsys
):
    """A journal whose '# session:' line was lost (edited by hand) replayed under any catalog without a word: it is
    refused now; a plain answers file (written by hand) is replayed under this call's settings, and says so."""
    save = str(tmp_path / "me.pt")
    assert _run(["--simulate", "--questions", "4", "--save", save, "--catalog", "train"])[0] == 0
    journal = save + ".answers"
    lines = open(journal).read().splitlines(keepends=True)
    cut = str(tmp_path / "cut.answers")
    open(cut, "w").write("".join(line for line in lines if not line.startswith("# session: ")))
    capsys.readouterr()
    code, _ = _run(["--answers", cut])
    err = capsys.readouterr().err
    assert (
        code == 2
        and err.startswith(f"error: --answers: {cut} is a scripts/duel.py journal without its")
        and (err.count("\n") == 1)
    ), err
    plain = str(tmp_path / "plain.answers")
    open(plain, "w").write("1\n2\n1\n")
    code, _ = _run(["--answers", plain])
    err = capsys.readouterr().err
    assert code == 0 and f"--answers: {plain} records no settings; its answers are given under this call's" in err


def test_a_journal_of_two_sessions_is_refused_and_a_session_on_a_load_replays_onto_it(tmp_path, capsys):
    """A second session on one --save appended to the first's journal: replayed in one go, its answers went to a
    learner that had not started from the first session's. A journal now holds one session (the one before is kept
    aside), and the second session's replays onto the learner it loaded; an old journal of two is refused."""
    save = str(tmp_path / "me.pt")
    assert _run(["--simulate", "--questions", "4", "--save", save])[0] == 0
    first = str(tmp_path / "first.pt")
    os.replace(save, first)
    assert _run(["--simulate", "--questions", "3", "--load", first, "--save", save])[0] == 0
    journal = save + ".answers"
    assert os.path.exists(journal + ".1")  # the first session's journal, kept aside whole
    again = str(tmp_path / "again.pt")
    assert _run(["--answers", journal, "--load", first, "--save", again])[0] == 0
    assert _same(_state(save), _state(again))
    code, _ = _run(["--answers", journal])  # without the learner it started from
    err = capsys.readouterr().err
    assert code == 2 and "was given with load" in err and err.count("\n") == 1, err
    both = tmp_path / "both.answers"
    both.write_text(open(journal + ".1").read() + open(journal).read())
    code, _ = _run(["--answers", str(both)])
    err = capsys.readouterr().err
    assert code == 2 and f"--answers: {both} holds 2 sessions' answers" in err and err.count("\n") == 1, err


def test_a_session_whose_input_is_closed_says_so_in_one_line():
    """duel.py <&- (standard input closed): an AttributeError traceback."""
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "duel.py")
    done = subprocess.run(
        f"{sys.executable} {script} --questions 2 <&-", shell=True, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert (
        done.stderr == "error: standard input is closed: answer in a terminal, or give --answers FILE or --simulate\n"
    )

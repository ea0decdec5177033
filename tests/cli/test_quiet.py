"""What a fit prints of Lightning's: none of its notes on every run (seed, accelerators, tips, the epoch's end), no
model summary, and a resumed run's progress bar with its length."""

from nvldb_pl.machinery.messages import NOTES
from tests.helpers.runs import _run


def test_a_fit_prints_no_lightning_notes_and_a_resumed_bar_shows_its_length(tmp_path):
    root = str(tmp_path / "run")
    first = _run(root, "--data.rounds=8", "--trainer.enable_progress_bar=true")
    went_on = _run(root, "--data.rounds=12", "--ckpt_path=last", "--trainer.enable_progress_bar=true")
    for out in (first, went_on):
        printed = out.stdout + out.stderr
        for note in NOTES:
            assert note not in printed, note
        assert "Trainable params" not in printed  # the model summary is off
        assert "R(T)/T" in printed  # the run's own summary line stays
    printed = went_on.stdout + went_on.stderr
    assert "Restored all states" in printed  # Lightning's line that a run went on is kept
    bar = went_on.stdout.replace("\r", "\n")  # tqdm's bar
    assert "/12 [" in bar and "12/12" in bar, bar[-500:]
    assert "9/?" not in bar and "12/?" not in bar, bar[-500:]  # the length, not "?" as Lightning starts it

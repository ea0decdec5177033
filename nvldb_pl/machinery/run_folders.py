"""What one CLI process made and holds of a run's folders, let go of as it ends: the run folder (held by its
``.lock``), the other folders the run writes (held by a flock), the folders it made; a refused new run leaves none
of them behind (:func:`release_run_folder`, called by :func:`nvldb_pl.cli.run_cli` whatever happened)."""

from __future__ import annotations

import os

from .checkpoint import RoundCheckpoint
from .host import check_folder_can_be_made, check_folder_writable, folders_to_make, hold_dir, holders
from .resume import drop_empty_event_files

RUN_FOLDERS: list[tuple[str, bool]] = []  # this process's run folder, and whether it created it (a new run)
MADE_FOLDERS: list[str] = []  # default_root_dir (and its parents) and lightning_logs, where this process made them
WITHOUT_CHECKPOINTS: list[bool] = []  # [True] once this process's trainer is made with enable_checkpointing false
HELD: list = []  # (run folder, its .lock held open): no second process goes on with the run meanwhile
HELD_PLACES: list = []  # descriptors of the other folders the run writes, held (see hold_places)


def release_run_folder() -> None:
    """At the end of ``run_cli``: remove the empty TensorBoard event files this process opened in its run
    folder (a refused run, a resume with nothing left to run), and the folder itself if this process
    created it (a new run) and nothing else is in it but the logger's hparams.yaml."""
    while HELD_PLACES:
        os.close(HELD_PLACES.pop())
    while HELD:  # let go of the run: the lock file removed where this process made it hold
        folder, held = HELD.pop()
        try:
            os.remove(os.path.join(folder, ".lock"))
        except OSError:
            pass
        held.close()
    while RUN_FOLDERS:
        folder, claimed = RUN_FOLDERS.pop()
        if not os.path.isdir(folder):
            continue
        drop_empty_event_files(folder)
        made = {"hparams.yaml", "config.yaml"}  # the logger's and the config's, written as fit began
        if claimed and set(os.listdir(folder)) <= made:  # a new run refused before anything of it: not left half-made
            for name in made & set(os.listdir(folder)):
                os.remove(os.path.join(folder, name))
        if claimed and not os.listdir(folder):
            os.rmdir(folder)
    while MADE_FOLDERS:  # lightning_logs, then default_root_dir and up: a refused new run leaves no empty folder
        folder = MADE_FOLDERS.pop()
        try:
            if os.path.isdir(folder) and not os.listdir(folder):
                os.rmdir(folder)
        except OSError:  # another process of the run wrote into it meanwhile
            pass


def clear() -> None:
    """A new CLI call in this process: nothing made or held yet."""
    RUN_FOLDERS.clear()
    MADE_FOLDERS.clear()
    WITHOUT_CHECKPOINTS.clear()


def hold_places(trainer) -> None:
    """The folders this run writes that no version folder's lock covers, held while it runs (a flock of the folder
    itself): ``default_root_dir`` under ``--trainer.logger false``, a ``checkpoint.dirpath`` given. Another run
    on one of them now is refused naming the field and the process."""
    saver = next((c for c in trainer.callbacks if isinstance(c, RoundCheckpoint)), None)
    places = [] if trainer.loggers else [("trainer.default_root_dir", trainer.default_root_dir)]
    if saver is not None and saver.dirpath:
        places.append(("checkpoint.dirpath", str(saver.dirpath)))
    for field, folder in places:
        if not os.path.isdir(folder):
            check_folder_can_be_made(folder, field)
            MADE_FOLDERS.extend(folders_to_make(folder))
            os.makedirs(folder)
        check_folder_writable(folder, field, "; the run writes there: give a folder it can write")
        held = hold_dir(folder)
        if held is None:
            pids = ", ".join(map(str, holders(folder))) or "unknown"
            raise ValueError(
                f"{field}: {folder} is being written by another run now (process {pids}); two runs there would "
                f"write over each other's files: give this one another folder, or wait for that one to end"
            )
        HELD_PLACES.append(held)

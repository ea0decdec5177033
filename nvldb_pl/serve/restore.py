"""A page's learners at a restart (:class:`Restore`, a mixin of :class:`nvldb_pl.serve.annotation.Annotation`): each
rebuilt from its file beside the database where the database holds the same answers up to the file's last, then the
answers after it replayed; a file of another study, or a database that lost acknowledged answers, refused naming
``--db``."""

from __future__ import annotations

import glob
import os
from typing import Optional

from ..live import DuelingBandit
from .worker import chain_of, sha256_of


class Restore:
    """Needs the annotation's ``store``, ``learners``, ``objective`` and ``snapshot_path``."""

    def _learner_files(self) -> dict:
        """The learner files beside the database that hold answers, by learner: (bandit, held) where the database
        holds the same answers up to the file's last (``held`` of its answers to learn), else a ValueError naming
        ``--db``. Files saved before they recorded their last answer: as the database's record of them says."""
        todo = {k: self.store.to_learn(k) for k in self.store.learners()}
        found = {}
        for path in sorted(glob.glob(glob.escape(self.store.path) + ".learner*.pt")):
            try:
                bandit = DuelingBandit.from_checkpoint(path, objective=self.objective)
            except ValueError:
                continue  # unreadable: a copy only (the database holds every answer it was made from)
            meta = bandit.saved_meta or {}
            if "last_answer" not in meta:
                continue  # an older file: taken below only where the database vouches for its sha256
            key, last = meta.get("learner"), int(meta["last_answer"])
            refused = set(meta.get("refused") or [])  # its refusals, which the database may not have recorded
            untrained = set(meta.get("untrained") or [])  # as its answers taken without the network's steps
            answers = [row for row in todo.get(key, []) if row[0] not in refused]
            seqs = [row[0] for row in answers]
            if last == 0 and not answers:
                continue
            where = f"--db: {self.store.path}"
            if last not in seqs:
                newest = f"#{seqs[-1]}" if seqs else "none"
                raise ValueError(
                    f"{where}: its learner file {path} holds answers up to #{last}, and the database's last answer of "
                    f"that learner is {newest}: the database has lost acknowledged answers, or the file is another "
                    f"study's; restore the database (with its -wal file) from a backup, or move the file away (nothing "
                    f"was changed)"
                )
            n = seqs.index(last) + 1
            digest = chain_of(  # an answer's train as recorded, else as the file says
                (seq, offer, i, j, choice, train if learned else seq not in untrained)
                for seq, offer, i, j, choice, learned, train in answers[:n]
            )
            if digest != meta.get("digest") or bandit.num_observed != n:
                raise ValueError(
                    f"{where}: its learner file {path} holds other answers than the database up to #{last} (their "
                    f"digests differ): the file is another study's or the database was changed; move the file away "
                    f"to rebuild the learner from the database (nothing was changed)"
                )
            found[key] = (bandit, n, digest, last, sorted(refused), sorted(untrained))
        return found

    def _restore(self, key: str, checked: Optional[tuple] = None) -> int:
        """Rebuild learner ``key`` from its file (``checked``: :meth:`_learner_files`'s) and the answers after it;
        the number of answers replayed."""
        todo = self.store.to_learn(key)
        bandit, held = None, 0
        if checked is not None:
            bandit, held, digest, last, refused, untrained = checked
            self.learners.chain[key] = (last, digest)
            self.learners.refused[key] = refused
            self.learners.untrained[key] = untrained
            # what the file holds, the database learns (a server killed before it recorded the learning process's
            # reports): refusals recorded, answers marked learned
            for seq in refused:
                self.store.refused(seq, "refused by the learner (recorded from its file at a restart)", only_new=True)
            todo = [row for row in todo if row[0] not in refused]
            self.store.mark_learned([row[0] for row in todo[:held] if row[5] is None], set(untrained))
        else:  # a file saved before files recorded their last answer: where the database vouches for it
            snap, path = self.store.snapshot(key), self.snapshot_path(key)  # the file beside this database only
            if snap is not None and os.path.isfile(path) and sha256_of(path) == snap[1]:  # (a copied database's
                bandit, held = DuelingBandit.from_checkpoint(path, objective=self.objective), int(snap[0])  # record
                # names the original's file, in another folder: not this study's learner)
            if bandit is None or held > len(todo) or bandit.num_observed != held:
                bandit, held = None, 0  # no file the database vouches for: from the config
            digest = chain_of((seq, offer, i, j, choice, train) for seq, offer, i, j, choice, _, train in todo[:held])
            self.learners.chain[key] = (todo[held - 1][0] if held else 0, digest)
            self.learners.untrained[key] = [row[0] for row in todo[:held] if not row[6]]
        self.learners.bandit(key, bandit)
        for seq, offer, i, j, choice, _, train in todo[held:]:  # as each was taken (not learned yet: with the steps)
            self.learners.learn(key, seq, offer, i, j, choice, train)
        if len(todo) > held:
            self.learners.save(key)
        return len(todo) - held

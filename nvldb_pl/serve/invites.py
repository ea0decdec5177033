"""The invited annotators' rows of a study's database (tables ``invites`` and ``invite_sessions``): an annotator's
name and the sha256 of their secret (the secret itself is kept nowhere), the session each link started, and a
withdrawn invite (its row kept, its secret no longer matching any link, so the study stays invite-only).
"""

from __future__ import annotations

import time
import uuid
from typing import Optional

WITHDRAWN = "withdrawn:"  # a withdrawn invite's secret column: a value no link's sha256 can be


class Invites:
    """The invite queries of :class:`nvldb_pl.serve.store.Store` (a mixin: ``rows`` and ``_write`` are the store's)."""

    def add_invite(self, annotator: str, secret_sha256: str) -> None:
        self._write("INSERT OR REPLACE INTO invites VALUES (?, ?, ?)", (annotator, secret_sha256, time.time()))

    def invited(self, secret_sha256: str) -> Optional[str]:
        r = self.rows("SELECT annotator FROM invites WHERE secret_sha256 = ?", (secret_sha256,))
        return r[0][0] if r else None

    def has_invites(self) -> bool:
        """Whether the study has (or had: a withdrawn invite stays, its secret no longer matching) invites."""
        return bool(self.rows("SELECT 1 FROM invites LIMIT 1"))

    def has_invite(self, annotator: str) -> bool:
        return bool(
            self.rows(
                f"SELECT 1 FROM invites WHERE annotator = ? AND secret_sha256 NOT LIKE '{WITHDRAWN}%'", (annotator,)
            )
        )

    def invite_session(self, secret_sha256: str) -> Optional[str]:
        """The session an invite's link started, if it started one."""
        r = self.rows("SELECT session FROM invite_sessions WHERE secret_sha256 = ?", (secret_sha256,))
        return r[0][0] if r else None

    def withdraw_invite(self, annotator: str) -> bool:
        """Withdraw ``annotator``'s invite: its secret no longer matches (the row stays: the study stays
        invite-only); False if they have none."""
        found = self.has_invite(annotator)
        if found:
            self._write(
                "UPDATE invites SET secret_sha256 = ? WHERE annotator = ?", (WITHDRAWN + uuid.uuid4().hex, annotator)
            )
        return bool(found)

"""A web page that asks people "A or B?" about items, learns as they answer, and shows the learned ranking.

    nvldb-serve                                     # installed as a command: the same as python scripts/serve.py
    python scripts/serve.py                         # the built-in catalog of scripts/duel.py, answers in ~/.local/share/nvldb_pl
    python scripts/serve.py --items items.csv --db answers.db --port 8000
    python scripts/serve.py --token SECRET          # annotators open http://HOST:PORT/?token=SECRET
    python scripts/serve.py --invite alice --invite bob --prompt "Which would you rather drink?"   # a link each

Items file: a CSV with a header: ``name``, optional ``text`` and ``image`` (URL) columns shown to people,
every other column a numeric feature (see nvldb_pl.serve.items). Every answer is in ``--db`` (SQLite)
before the page gets its reply; starting again on the same ``--db`` goes on from every answer given.
The researcher's link (``?token=`` the researcher's token: ``--researcher-token``, else a new one each start) opens
the exports, the status and every annotator's ranking; ``--invite NAME`` gives an annotator a link of their own
(a secret kept as its sha256 in ``--db``): once a study has invites, only they start sessions.
Needs the serve extra: pip install -e '.[serve]'.
"""

import argparse
import os
import secrets
import signal
import socket
import sys

from .items import builtin_catalog, read_items
from ..machinery.own_modules import find_own_modules_here
from ..machinery.yaml_files import shipped_config

SIDECARS = ("-wal", "-shm", "-journal", ".lock", ".acked")  # SQLite's files beside a database, and the server's


def default_db() -> str:
    """Where answers go without --db: the user's data folder (``$XDG_DATA_HOME``, else ~/.local/share), never the
    folder the server was started in (a checkout's work tree, say)."""
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "nvldb_pl", "answers.db")


def read_consent(path: str) -> str:
    """``--consent``: the text of the file, read whole (refused: no such file, not UTF-8, over 64 KiB)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--consent: {path}: no such file")
    if os.path.getsize(path) > 65536:
        raise ValueError(f"--consent: {path}: over 64 KiB; a consent text is a page or two")
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except UnicodeDecodeError:
        raise ValueError(f"--consent: {path}: not UTF-8 text") from None


def check_host(host: str, seconds: float = 5.0) -> None:
    """``--host``: an address of this machine to bind, an IP or a name resolved within ``seconds`` (a name no resolver
    answers, as on a machine without a network, would hang the start)."""
    import ipaddress
    import threading

    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    found: list = []
    worker = threading.Thread(target=lambda: found.append(_resolve(host)), daemon=True)
    worker.start()
    worker.join(seconds)
    if not found or found[0] is None:
        said = "is not an address, and no name server answered for it" if not found else "names no address"
        raise ValueError(f"--host: {host!r} {said}; give an IP of this machine (127.0.0.1, 0.0.0.0) or localhost")


def _resolve(host: str):
    try:
        return socket.getaddrinfo(host, None)
    except OSError:
        return None


def parser() -> argparse.ArgumentParser:
    """The server's options (``--help`` lists them with their defaults)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=os.path.expanduser, help="the items CSV (default: the built-in catalog)")
    p.add_argument(
        "--config",
        default=shipped_config("live"),
        type=os.path.expanduser,
        help="the learner's config (default configs/live.yaml)",
    )
    p.add_argument(
        "--db",
        type=os.path.expanduser,
        help="the answers' SQLite file (default: answers.db in $XDG_DATA_HOME/nvldb_pl, else ~/.local/share/nvldb_pl)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free port)")
    p.add_argument(
        "--objective",
        default="rank",
        choices=["regret", "rank"],
        help="what the study wants: rank (the pair of every item that tells most about the whole order; the default) "
        "or regret (the learner's own rule on --offer items: good items shown most): docs/serve.md",
    )
    p.add_argument(
        "--ranking",
        default="posterior",
        choices=["posterior", "learner"],
        help="what the learned ranking shows: posterior (the answers' posterior over the items' utilities, linear in "
        "their features, with 90%% bands; the default) or learner (the learner's own estimate): docs/serve.md",
    )
    p.add_argument(
        "--offer",
        type=int,
        default=None,
        help="items offered a question, at random; the learner picks two (default 4; objective rank: every item)",
    )
    p.add_argument(
        "--offer-all", action="store_true", help="offer every item each question (the learner picks any two)"
    )
    p.add_argument("--seed", type=int, default=0, help="the learner's seed and the offers' draws (default 0)")
    p.add_argument(
        "--per-annotator", action="store_true", help="one learner an annotator (?annotator=NAME), not one for all"
    )
    p.add_argument("--save-every", type=int, default=10, help="save the learners every this many answers (default 10)")
    p.add_argument("--token", help="an access token annotators must give (?token=...)")
    p.add_argument(
        "--researcher-token",
        help="the researcher's token for the exports, the status and every ranking (default: a new one, printed)",
    )
    p.add_argument(
        "--invite",
        action="append",
        default=[],
        metavar="NAME",
        help="invite an annotator: prints their link (repeat for several); a study with invites takes no others",
    )
    p.add_argument(
        "--withdraw",
        action="append",
        default=[],
        metavar="NAME",
        help="withdraw an annotator's invite: their link starts nothing and their session answers no more (their "
        "answers stay; repeat for several; --invite NAME gives them a new link, the old one withdrawn alike)",
    )
    shown = p.add_mutually_exclusive_group()
    shown.add_argument(
        "--show-ranking",
        dest="show_ranking",
        action="store_const",
        const=True,
        default=None,
        help="annotators see the learned ranking (the default without invites)",
    )
    shown.add_argument(
        "--hide-ranking",
        dest="show_ranking",
        action="store_const",
        const=False,
        help="annotators do not see it (the default with invites: a study's participants answer without seeing "
        "what everyone's answers made); the researcher's link always does",
    )
    p.add_argument("--prompt", help='the question put to people (default "Which do you prefer?")')
    p.add_argument(
        "--completion-code",
        help="the code a person who answered --questions-per-person questions is shown (the one a study site such as "
        "Prolific or MTurk checks)",
    )
    p.add_argument("--completion-url", help="and a link back to the study site (http(s)://...)")
    p.add_argument(
        "--completion-code-failed",
        help="the code instead for a person who answered every --attention check the other way (without it: none)",
    )
    p.add_argument(
        "--balance-sides",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show the learner's first pick on the left or the right at random (recorded as shown), so that a "
        "leaning to one side does not pass for a preference (the default; --no-balance-sides: always on the left)",
    )
    p.add_argument(
        "--repeat-every",
        type=int,
        metavar="N",
        help="a consistency check: every N questions of a person, one they answered before, sides swapped "
        "(the researcher's /api/reliability counts how often they answer it the same)",
    )
    p.add_argument(
        "--attention",
        action="append",
        default=[],
        metavar="BETTER>WORSE",
        help="an attention check: a pair of items (names as in the items file) whose answer is known, asked every "
        "--attention-every questions in turn (repeat for several; /api/reliability counts the answers the known way)",
    )
    p.add_argument("--attention-every", type=int, metavar="N", help="questions between attention checks (default 10)")
    p.add_argument(
        "--consent",
        type=os.path.expanduser,
        metavar="FILE",
        help="a text file (UTF-8; paragraphs apart by a blank line) each person reads and agrees to before their "
        "first question; their consent is recorded with their session",
    )
    p.add_argument(
        "--most-behind",
        type=int,
        default=20,
        help="answers the learner (a process of its own, taking what waits in batches) may lag before a reply waits "
        "for it (default 20, a tenth of a second of learning); larger: questions chosen on an older learner",
    )
    p.add_argument(
        "--questions-per-person",
        type=int,
        help="each person's goal: after this many answers the page thanks them and asks no more (default: no end)",
    )
    p.add_argument("--max-sessions", type=int, help="an open study's sessions in all (invited ones not counted)")
    p.add_argument(
        "--max-sessions-per-client",
        type=int,
        help="sessions one address may start (since the server started; invited ones not counted)",
    )
    return p


def starlette_floor(version: str = "") -> str:
    """The refusal of a starlette before 1.0.1, where a malformed Host header changes ``request.url.path`` and so
    opens the researcher's exports without a token (CVE-2026-48710); "" for one at or past it."""
    import re

    if not version:
        from importlib.metadata import version as installed

        version = installed("starlette")
    parts = [int(x) for x in re.findall(r"\d+", version)[:3]] + [0, 0, 0]
    if parts[:3] >= [1, 0, 1]:
        return ""
    return (
        f"starlette {version} lets a malformed Host header open the researcher's exports without a token "
        f"(CVE-2026-48710); pip install 'starlette>=1.0.1' 'fastapi>=0.134'"
    )


def main(argv=None) -> int:
    find_own_modules_here()  # a class_path of one's own, from the working folder
    a = parser().parse_args(argv)
    try:
        import uvicorn

        from .app import make_app
    except ImportError as err:
        print(
            f"error: scripts/serve.py needs the serve extra ({err.name} is missing): pip install -e '.[serve]'",
            file=sys.stderr,
        )
        return 2
    floor = starlette_floor()
    if floor:
        print(f"error: {floor}", file=sys.stderr)
        return 2
    import torch

    from .annotation import Annotation
    from .study import check_name
    from .store import Store

    store, before = None, set()
    try:
        check_host(a.host)
        if not 0 <= a.port <= 65535:
            raise ValueError(f"--port: must be between 0 and 65535, got {a.port}")
        if not os.path.isfile(a.config):
            raise FileNotFoundError(f"--config: {a.config}: no such file")
        if a.db is None:  # the default: the user's data folder, made if it is not there
            a.db = default_db()
            os.makedirs(os.path.dirname(a.db), exist_ok=True)
        folder = os.path.dirname(os.path.abspath(a.db))
        if not os.path.isdir(folder):
            raise ValueError(f"--db: {a.db}: folder {folder} does not exist")
        if os.path.isdir(a.db):
            raise ValueError(f"--db: {a.db} is a folder; give a file name in it")
        items = read_items(a.items) if a.items else builtin_catalog()
        consent = read_consent(a.consent) if a.consent else None
        before = {f for f in (a.db, *(a.db + end for end in SIDECARS)) if os.path.exists(f)}
        offer = None if a.offer_all else (a.offer if a.offer is not None else (4 if a.objective == "regret" else None))
        store = Store(a.db, exclusive=True)  # one server a database
        # every refusal before the learner's process starts and before anything is written (a refused start
        # changes no file, and leaves no process behind: it hung on a busy port, its learner's process alive)
        gone = set(a.withdraw) & set(a.invite)
        if gone:
            raise ValueError(f"--withdraw/--invite: {sorted(gone)} given to both; give one")
        for name in a.invite:
            check_name(name, "--invite")
        for name in a.withdraw:
            if not store.has_invite(name):
                raise ValueError(f"--withdraw: {name!r} has no invite in this study")
        sock = socket.socket(socket.AF_INET6 if ":" in a.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # a reply in one segment, not held by Nagle's algorithm for the last one's ACK (40 ms on a kept-alive
        # connection); the connections accepted take it from here
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((a.host, a.port))
            sock.listen(128)  # connections wait from now on, before the address is printed
        except OSError as err:
            sock.close()
            raise ValueError(f"--host/--port: cannot listen on {a.host}:{a.port} ({err.strerror})") from None
        annotation = Annotation(
            items,
            store,
            a.config,
            a.seed,
            offer,
            a.per_annotator,
            a.save_every,
            a.objective,
            a.questions_per_person,
            background=True,  # a reply waits for no learning, unless the learner lags --most-behind answers
            most_behind=a.most_behind,
            ranking=a.ranking,
            show_ranking=a.show_ranking,
            completion_code=a.completion_code,
            completion_url=a.completion_url,
            completion_code_failed=a.completion_code_failed,
            consent_text=consent,
            balance_sides=a.balance_sides,
            repeat_every=a.repeat_every,
            attention=a.attention,
            attention_every=a.attention_every,
            max_sessions=a.max_sessions,
            max_sessions_per_client=a.max_sessions_per_client,
        )
        for name in a.withdraw:
            annotation.withdraw(name)
        invites = {name: annotation.invite(name) for name in a.invite}
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        if store is not None:  # a refused start: the files it made go, those it found stay as they were
            store.abandon()
            for f in (a.db, *(a.db + end for end in SIDECARS)):
                if f not in before and os.path.exists(f):
                    os.remove(f)
        return 2
    researcher = a.researcher_token or secrets.token_urlsafe(18)
    local = {"127.0.0.1", "localhost", "::1"}
    hosts = local if a.host in local else None if a.host in ("0.0.0.0", "::") else {a.host}
    app = make_app(annotation, a.token, researcher, hosts, a.prompt)
    torch.set_num_threads(1)  # the learner's tensors are small: a second thread only contends with the replies
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    # a stop from here on, before uvicorn's own handlers or after them (uvicorn stops gracefully on SIGINT/SIGTERM,
    # then raises the signal again with the handlers it found), ends the serving; the learners are saved below
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
    host, port = sock.getsockname()[:2]
    restored = sum(annotation.restored.values())
    shown = f"[{host}]" if ":" in host else host
    print(
        f"serving {len(items.names)} items ({items.source}), objective {a.objective}, at http://{shown}:{port}/"
        + (f"?token={a.token}" if a.token else "")
        + f"\nanswers in {a.db}: {annotation.store.count_answers()} kept, {restored} restored into the learner(s)",
        flush=True,
    )
    print(f"researcher (exports, status, every ranking): http://{shown}:{port}/?token={researcher}", flush=True)
    for name, secret in invites.items():
        print(f"invite for {name}: http://{shown}:{port}/?invite={secret}", flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        annotation.close()
        print(f"stopped; {annotation.store.count_answers()} answers in {a.db}, learners saved", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

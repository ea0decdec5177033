"""The HTTP face of :class:`~.annotation.Annotation` (FastAPI; ``pip install -e '.[serve]'``).

    GET  /                      the page (``page.html``: plain HTML and a little JavaScript)
    GET  /images/<k>            item k's image file, where the items CSV names one beside it
    GET  /api/study             what a person sees before their first question: {"consent": text or null, "researcher": the researcher's token given}
    POST /api/session           {"annotator": name or null} or {"invite": secret}, and {"consent": true} where the
                                study asks for it -> {"session"}
    GET  /api/question?session= the session's question: {"question", "first", "second", "answers", "learned"}
    POST /api/answer            {"session", "question", "choice": 1 | 2 | 0 (can't decide)} -> {"answer", ...}
    POST /api/undo              {"session"}: the session's last answer taken back (kept as undone) -> {"undone", ...}
    GET  /api/ranking[?session=] the items best first, with how the ranking settled
    GET  /api/answers.csv, /api/answers.json, /api/ranking.csv, /api/bradley-terry.csv   exports
    GET  /api/reliability       per session: answers, pairs answered again and as the first time; between sessions
    GET  /api/status            answers kept, answers each learner holds, answers restored at start, repeats avoided

A refused request gets a 4xx and ``{"error": one line}`` (a value quoted in it cut short), and changes nothing.

Who may ask what: with ``researcher_token`` set, the exports, the status and a ranking without a session (every
annotator's) need it, and a session's ranking needs a session of this server (not withdrawn) and a study that shows
annotators the ranking (:meth:`~.annotation.Annotation.shows_ranking`; the researcher's token always may); with
``token`` set, the annotators' requests need that (or the researcher's) unless the study has invites, whose secret
starts a session; a token travels as header ``X-Token`` or ``?token=``. With ``allowed_hosts``, a request whose Host
header names another server is refused (DNS rebinding). A body needs its Content-Length, at most ``MAX_BODY`` bytes
(a chunked one, whose size is known only as it is read, is refused). Every response
forbids framing and carries a content policy that allows the page's own script and style only (their sha256).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import os
import re
import sqlite3
import sys
from importlib import resources
from typing import Any, Optional

from fastapi import Body, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException

from .annotation import Annotation, BadRequest
from .items import IMAGE_TYPES


def _body(body, *fields, optional=()) -> list:
    """The values of ``fields`` in a JSON object body; refused: another type, a field missing or unknown."""
    if not isinstance(body, dict):
        raise BadRequest(400, "body: a JSON object")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise BadRequest(422, f"body: no field(s) {unknown}; it takes {list(fields)}")
    missing = [f for f in fields if f not in body and f not in optional]
    if missing:
        raise BadRequest(422, f"body: missing field(s) {missing}")
    return [body.get(f) for f in fields]


MAX_BODY = 65536  # bytes: every body the API takes is a few fields
RESEARCHER_ONLY = ("/api/answers.csv", "/api/answers.json", "/api/bradley-terry.csv", "/api/reliability", "/api/status")
# and /api/ranking(.csv) without a session
ANNOTATOR_PATHS = ("/api/study", "/api/session", "/api/question", "/api/answer", "/api/undo", "/api/ranking")  # invites


def _inline_hash(page: str, tag: str) -> str:
    """The CSP source of the page's one inline ``<tag>``: 'sha256-...' of its text."""
    body = re.search(rf"<{tag}>(.*?)</{tag}>", page, flags=re.S).group(1)
    return "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"


def _host_name(header: str) -> str:
    """The name of a Host header, without its port (an IPv6 address without its brackets)."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _matches(given: str, secret: Optional[str]) -> bool:
    return secret is not None and hmac.compare_digest(given.encode(), secret.encode())


class _Guard:
    """Every request's head checked before its handler (``refusal``: a response, or None to go on), and ``headers``
    put on every response. A plain ASGI middleware: Starlette's ``BaseHTTPMiddleware`` (``@app.middleware``) costs
    each reply a task and a body stream of its own."""

    def __init__(self, app, refusal, headers: dict):
        self.app, self.refusal, self.headers = app, refusal, headers

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refused = self.refusal(Request(scope))
        if refused is not None:
            return await refused(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).update(self.headers)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def make_app(
    annotation: Annotation,
    token: Optional[str] = None,
    researcher_token: Optional[str] = None,
    allowed_hosts: Optional[set] = None,
    prompt: Optional[str] = None,
) -> FastAPI:
    """The web app over ``annotation`` (the module's doc: who may ask what). ``token``: the access token annotators
    need, or None; ``researcher_token``: the researcher's, or None (open); ``allowed_hosts``: the names a Host
    header may give, or None (any); ``prompt``: the question put to people (default "Which do you prefer?")."""
    app = FastAPI(title="nvldb_pl: A or B?", docs_url=None, redoc_url=None, openapi_url=None)
    page = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")
    policy = (
        f"default-src 'none'; script-src {_inline_hash(page, 'script')}; style-src {_inline_hash(page, 'style')}; "
        "img-src * data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    if prompt is not None:
        page = page.replace("<p>Which do you prefer?</p>", f"<p>{html.escape(prompt)}</p>", 1)
    headers = {
        "Content-Security-Policy": policy,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",  # a link's token or invite never leaves in a Referer
    }

    def refused(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    def refusal(request: Request) -> Optional[JSONResponse]:
        """The refusal of a request before its handler (who may ask what, the body's size), or None."""
        host = _host_name(request.headers.get("host", ""))
        if allowed_hosts is not None and host not in allowed_hosts:
            return refused(400, "Host: this server answers to " + ", ".join(sorted(allowed_hosts)))
        length = request.headers.get("content-length")
        if request.method not in ("GET", "HEAD", "OPTIONS") and (
            length is None or "transfer-encoding" in request.headers
        ):
            return refused(411, "body: give its Content-Length (a chunked body is not taken)")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return refused(413, f"body: at most {MAX_BODY} bytes")
        path = request.url.path
        if path.startswith("/api"):
            given = request.headers.get("x-token") or request.query_params.get("token") or ""
            researcher = _matches(given, researcher_token)
            whole = path in RESEARCHER_ONLY or (
                path in ("/api/ranking", "/api/ranking.csv") and "session" not in request.query_params
            )
            if whole and researcher_token is not None and not researcher:
                return refused(401, "token: the researcher's token is needed here (exports, status, every ranking)")
            if not whole and token is not None and not (researcher or _matches(given, token)):
                if not (annotation.store.has_invites() and path in ANNOTATOR_PATHS):
                    return refused(401, "token: missing or wrong; open the page with ?token=...")
            if path in ("/api/ranking", "/api/ranking.csv") and not researcher and not annotation.shows_ranking():
                return refused(
                    403, "ranking: this study does not show annotators the ranking (the researcher's link does)"
                )
        return None

    app.add_middleware(_Guard, refusal=refusal, headers=headers)

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, err: BadRequest):
        return JSONResponse({"error": str(err)}, status_code=err.status)

    @app.exception_handler(sqlite3.OperationalError)
    @app.exception_handler(OSError)
    async def cannot_write(request: Request, err: Exception):
        # a full disk, a database gone read-only: said in one line on the page and in the log (not a bare 500); an
        # answer is acknowledged only once kept, and one kept before the fault is not asked again
        message = f"the server cannot use its database or files ({' '.join(str(err).split())[:200]}); try again later"
        print(f"error: {request.method} {request.url.path}: {message}", file=sys.stderr, flush=True)
        return JSONResponse({"error": message}, status_code=503, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError):
        e = err.errors()[0] if err.errors() else {}
        where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        kind = "body: not valid JSON" if e.get("type") == "json_invalid" else f"{where}: {e.get('msg', 'invalid')}"
        return JSONResponse({"error": kind}, status_code=400 if e.get("type") == "json_invalid" else 422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException):
        return JSONResponse({"error": f"{request.url.path}: {err.detail}"}, status_code=err.status_code)

    @app.get("/", response_class=HTMLResponse)
    def index():
        return page

    @app.get("/images/{k}")
    def image(k: int):
        """An item's image file (the items CSV named it beside itself), as its type; else 404."""
        files = annotation.items.image_files
        if files is None or not 0 <= k < len(files) or files[k] is None:
            raise StarletteHTTPException(404, "no such image")
        kind = IMAGE_TYPES[os.path.splitext(files[k])[1].lower()]
        return FileResponse(files[k], media_type=kind, headers={"Cache-Control": "max-age=3600"})

    @app.get("/api/study")
    def study(request: Request):
        """The study's consent text, and whether the request carries the researcher's token (the page then opens on
        the ranking and the exports: a researcher is no participant, asked no consent and no questions)."""
        given = request.headers.get("x-token") or request.query_params.get("token") or ""
        return {
            "consent": annotation.consent_text,
            "researcher": bool(researcher_token) and _matches(given, researcher_token),
        }

    @app.post("/api/session")
    def session(request: Request, body: Any = Body(None)):
        fields = ("annotator", "invite", "consent")
        annotator, invite, consent = _body({} if body is None else body, *fields, optional=fields)
        client = request.client.host if request.client else None
        return {"session": annotation.new_session(annotator, invite, consent, client)}

    @app.get("/api/question")
    def question(session: str):
        return {**annotation.question(session), "ranking": annotation.shows_ranking()}

    @app.post("/api/answer")
    def answer(body: Any = Body(...)):
        sid, qid, choice = _body(body, "session", "question", "choice")
        return annotation.answer(sid, qid, choice)

    @app.post("/api/undo")
    def undo(body: Any = Body(...)):
        (sid,) = _body(body, "session")
        return annotation.undo(sid)

    @app.get("/api/ranking")
    def ranking(session: Optional[str] = None):
        return annotation.ranking(annotation.learner_for_view(session))

    def download(text: str, name: str) -> PlainTextResponse:
        return PlainTextResponse(
            text, media_type="text/csv", headers={"Content-Disposition": f"attachment; filename={name}"}
        )

    @app.get("/api/answers.csv", response_class=PlainTextResponse)
    def answers_csv():
        return download(annotation.answers_csv(), "answers.csv")

    @app.get("/api/answers.json")
    def answers_json():
        return annotation.answer_rows()

    @app.get("/api/reliability")
    def reliability():
        return annotation.reliability()

    @app.get("/api/bradley-terry.csv", response_class=PlainTextResponse)
    def bradley_terry_csv():
        return download(annotation.bradley_terry_csv(), "bradley-terry.csv")

    @app.get("/api/ranking.csv", response_class=PlainTextResponse)
    def ranking_csv(session: Optional[str] = None):
        return download(annotation.ranking_csv(annotation.learner_for_view(session)), "ranking.csv")

    @app.get("/api/status")
    def status():
        with annotation.lock:
            return {
                "answers": annotation.store.count_answers(),
                "learned": {k: b.num_observed for k, b in annotation.bandits.items()},
                "restored": annotation.restored,
                "items": len(annotation.items.names),
                "repeats_avoided": annotation.repeats_avoided,
                **({"consents": annotation.store.consents()} if annotation.consent_text is not None else {}),
                **(
                    {"behind": annotation.worker.behind, "failed": annotation.worker.failed}
                    if annotation.worker is not None
                    else {}
                ),
            }

    return app

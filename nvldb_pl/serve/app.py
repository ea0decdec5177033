"""The HTTP face of :class:`~.annotation.Annotation` (FastAPI; ``pip install -e '.[serve]'``).

    GET  /                      the page (``page.html``: plain HTML and a little JavaScript)
    POST /api/session           {"annotator": name or null} -> {"session"}
    GET  /api/question?session= the session's question: {"question", "first", "second", "answers", "learned"}
    POST /api/answer            {"session", "question", "choice": 1 | 2 | 0 (can't decide)} -> {"answer", ...}
    GET  /api/ranking[?session=] the items best first, with how the ranking settled
    GET  /api/answers.csv, /api/ranking.csv   exports
    GET  /api/status            answers kept, answers each learner holds, answers restored at start

A refused request gets a 4xx and ``{"error": one line}``, and changes nothing. With ``token`` set,
every ``/api`` request must carry it (header ``X-Token``, or ``?token=``).
"""

from __future__ import annotations

import hmac
from importlib import resources
from typing import Any, Optional

from fastapi import Body, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .annotation import Annotation, BadRequest


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


def make_app(annotation: Annotation, token: Optional[str] = None) -> FastAPI:
    """The web app over ``annotation``; ``token``: the access token annotators need, or None."""
    app = FastAPI(title="nvldb_pl: A or B?", docs_url=None, redoc_url=None, openapi_url=None)
    page = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")

    @app.middleware("http")
    async def check_token(request: Request, call_next):
        if token is not None and request.url.path.startswith("/api"):
            given = request.headers.get("x-token") or request.query_params.get("token") or ""
            if not hmac.compare_digest(given.encode(), token.encode()):
                return JSONResponse(
                    {"error": "token: missing or wrong; open the page with ?token=..."}, status_code=401
                )
        return await call_next(request)

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, err: BadRequest):
        return JSONResponse({"error": str(err)}, status_code=err.status)

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

    @app.post("/api/session")
    def session(body: Any = Body(None)):
        (annotator,) = _body({} if body is None else body, "annotator", optional=("annotator",))
        return {"session": annotation.new_session(annotator)}

    @app.get("/api/question")
    def question(session: str):
        return annotation.question(session)

    @app.post("/api/answer")
    def answer(body: Any = Body(...)):
        sid, qid, choice = _body(body, "session", "question", "choice")
        return annotation.answer(sid, qid, choice)

    @app.get("/api/ranking")
    def ranking(session: Optional[str] = None):
        return annotation.ranking(annotation.learner_for_view(session))

    @app.get("/api/answers.csv", response_class=PlainTextResponse)
    def answers_csv():
        return PlainTextResponse(
            annotation.answers_csv(),
            media_type="text/csv",
            headers={"Content-Disposition": "attachment; filename=answers.csv"},
        )

    @app.get("/api/ranking.csv", response_class=PlainTextResponse)
    def ranking_csv(session: Optional[str] = None):
        text = annotation.ranking_csv(annotation.learner_for_view(session))
        return PlainTextResponse(
            text, media_type="text/csv", headers={"Content-Disposition": "attachment; filename=ranking.csv"}
        )

    @app.get("/api/status")
    def status():
        with annotation.lock:
            return {
                "answers": annotation.store.count_answers(),
                "learned": {k: b.num_observed for k, b in annotation.bandits.items()},
                "restored": annotation.restored,
                "items": len(annotation.items.names),
            }

    return app

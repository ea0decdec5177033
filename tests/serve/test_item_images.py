"""Items with images from local files: an items CSV's ``image`` cell may name a file beside it, served by the page at
``/images/<k>``; a path outside the CSV's folder, a file that is not there and a type not served are refused at start,
naming the line and column."""

import base64

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install -e '.[serve]')")
pytest.importorskip("httpx", reason="httpx (FastAPI's test client) is not installed")

from nvldb_pl.serve.items import read_items  # noqa: E402
from tests.serve.test_serve_security import _client  # noqa: E402

PNG = base64.b64decode(  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def _catalog(tmp_path, cells):
    (tmp_path / "pics").mkdir(exist_ok=True)
    (tmp_path / "pics" / "a.png").write_bytes(PNG)
    (tmp_path / "pics" / "b.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    rows = "".join(f"item{k},{k},{k % 2},{cell}\n" for k, cell in enumerate(cells))
    f = tmp_path / "items.csv"
    f.write_text("name,x,y,image\n" + rows)
    return str(f)


def test_an_items_local_image_is_served_by_the_page_and_a_url_is_left_as_it_is(tmp_path):
    items = read_items(_catalog(tmp_path, ["pics/a.png", "https://example.org/c.png", "pics/b.jpg", ""]))
    assert items.image == ["/images/0", "https://example.org/c.png", "/images/2", ""]
    c, _ = _client(tmp_path, items, offer=None)
    r = c.get("/images/0")
    assert r.status_code == 200 and r.content == PNG and r.headers["content-type"] == "image/png"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert c.get("/images/2").headers["content-type"] == "image/jpeg"
    for k in (1, 3, 4, -1):  # a URL's item, no image, no such item
        assert c.get(f"/images/{k}").status_code == 404, k
    sid = c.post("/api/session", json={}).json()["session"]
    q = c.get("/api/question", params={"session": sid}).json()
    shown = {q[side]["name"]: q[side]["image"] for side in ("first", "second")}
    assert all(image == items.image[int(name[4:])] for name, image in shown.items())


def test_an_image_file_is_part_of_the_catalogs_digest(tmp_path):
    before = read_items(_catalog(tmp_path, ["pics/a.png", "pics/b.jpg"])).sha256
    (tmp_path / "pics" / "b2.jpg").write_bytes(b"another picture")
    after = read_items(_catalog(tmp_path, ["pics/a.png", "pics/b2.jpg"])).sha256
    assert before != after  # a --db made with the other pictures is refused as made with other items


@pytest.mark.parametrize(
    "cell, error, message",
    [
        ("../outside.png", ValueError, "is outside the items file's folder"),
        ("/etc/passwd", ValueError, "is outside the items file's folder"),
        ("pics/../../outside.png", ValueError, "is outside the items file's folder"),
        ("pics/evil.svg", ValueError, "is not one of"),
        ("pics/missing.png", FileNotFoundError, "no such file beside"),
    ],
)
def test_an_image_outside_the_folder_missing_or_of_another_type_is_refused_naming_line_and_column(
    tmp_path, cell, error, message
):
    (tmp_path.parent / "outside.png").write_bytes(PNG)
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "evil.svg").write_text("<svg onload='alert(1)'/>")
    path = _catalog(tmp_path, ["pics/a.png", cell])
    with pytest.raises(error, match=message) as err:
        read_items(path)
    assert str(err.value).startswith(f"{path}, line 3, column 'image'")

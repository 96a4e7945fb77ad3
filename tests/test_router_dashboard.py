"""The dashboard in a real headless Chromium (Debian's package): it loads, its charts render, its numbers are /v1/stats."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx")
pytest.importorskip("fastapi")

import math
import os
import shutil
import subprocess
from html.parser import HTMLParser

import httpx
import numpy as np
from router_helpers import serve_in_thread, write_config

from genbandit.router import create_app, load_router_config
from genbandit.router.dashboard import reward_interval

FB = {"x-api-key": "fb-key"}
READ = {"x-api-key": "admin-key"}  # an admin key reads everywhere
MODELS = ("small", "medium", "large")
BATCHES = 5


def chromium(*args: str, timeout: float = 120) -> str:
    """Run headless Chromium with ``args``; its stdout."""
    exe = shutil.which("chromium")
    assert exe, "chromium is not installed (apt-get install -y chromium)"
    sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []
    out = subprocess.run([exe, "--headless", "--disable-gpu", "--hide-scrollbars", *sandbox, *args], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


class Dom(HTMLParser):
    """A page's elements in document order: tag, attributes, text (its own and its children's), ids of its ancestors."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict, list[str], set[str]]] = []
        self._open: list[tuple[str, dict, list[str], set[str]]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        element = (tag, attrs, [], {a["id"] for _, a, _, _ in self._open if a.get("id")})
        self.elements.append(element)
        if tag not in ("br", "img", "input", "link", "meta", "circle", "line", "polygon"):
            self._open.append(element)

    def handle_endtag(self, tag):
        if any(t == tag for t, *_ in self._open):
            while self._open.pop()[0] != tag:
                pass

    def handle_data(self, data):
        for element in self._open:
            element[2].append(data)

    def find(self, tag: str | None = None, within: str | None = None, **attrs) -> list[tuple[str, dict, str]]:
        """(tag, attributes, text) of the elements with ``tag`` (any if None), inside the element of id ``within``,
        with the given attributes (``data_k`` means ``data-k``)."""
        want = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [(t, a, "".join(text).strip()) for t, a, text, up in self.elements
                if (tag is None or t == tag) and (within is None or within in up) and all(a.get(k) == v for k, v in want.items())]

    def rows(self, table_id: str) -> list[list[tuple[dict, str]]]:
        """The body rows of a table: per row, its cells as (attributes, text)."""
        rows: list[list[tuple[dict, str]]] = []
        for t, a, text in self.find(within=table_id):
            if t == "tr":
                rows.append([])
            elif t == "td":
                rows[-1].append((a, text))
        return [r for r in rows if r]  # the header row has th cells only


@pytest.fixture(scope="module")
def router_url(tmp_path_factory):
    """A router on loopback with 3 models, decisions and feedback in BATCHES steps, the dashboard read after each."""
    tmp = tmp_path_factory.mktemp("dashboard")
    path = write_config(
        tmp / "router.toml",
        models=[{"name": n, "base_url": "http://127.0.0.1:9/v1", "cost": c} for n, c in zip(MODELS, (0.001, 0.02, 0.5))],
        policy="RFF-UCB",
        params={"n_components": 50, "seed": 0},
        embedding={"kind": "hashing", "dim": 32},
        store={"path": str(tmp / "state.db")},
    )
    rng = np.random.default_rng(0)
    topics = ["sort a list in python", "translate good morning to French", "prove that sqrt 2 is irrational", "plan a trip to Lima"]
    with serve_in_thread(create_app(load_router_config(path))) as url, httpx.Client(base_url=url, timeout=30) as http:
        for batch in range(BATCHES):
            for i in range(12):
                body = {"prompt": f"{topics[i % 4]} #{batch}-{i}"}
                if i == 11:
                    body["model"] = "large"  # a forced decision
                decision = http.post("/v1/route", json=body).json()
                if i % 6 != 5:  # some decisions get no feedback
                    reward = {"small": 0.3, "medium": 0.6, "large": 0.9}[decision["model"]] + 0.1 * rng.random()
                    r = http.post("/v1/feedback", json={"decision_id": decision["decision_id"], "reward": round(reward, 3)}, headers=FB)
                    assert r.status_code == 200
            assert http.get("/dashboard/data", headers=READ).status_code == 200
        yield url


def test_dashboard_data_is_v1_stats_plus_history(router_url):
    with httpx.Client(base_url=router_url, timeout=30) as http:
        for headers in ({}, {"x-api-key": "wrong"}):
            refused = http.get("/dashboard/data", headers=headers)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        data = http.get("/dashboard/data", headers=READ).json()
        stats = http.get("/v1/stats", headers=READ).json()
    assert data["stats"] == stats
    assert stats["decisions"] == BATCHES * 12 and stats["feedback"] == BATCHES * 10
    assert len(data["series"]) == BATCHES  # one point per batch; reading again without new traffic adds none
    assert [p["decisions"] for p in data["series"]] == [12 * (b + 1) for b in range(BATCHES)]
    low, high = data["reward_range"]
    for m in stats["models"]:
        mine = data["models"][m["name"]]
        assert mine["pulls"] == m["pulls"] == data["series"][-1]["models"][m["name"]]["pulls"]
        assert mine["spend"] == pytest.approx(m["pulls"] * m["cost"])
        if m["feedback"]:
            half = (high - low) * math.sqrt(math.log(2 / 0.05) / (2 * m["feedback"]))
            assert mine["interval"] == pytest.approx([max(low, m["mean_reward"] - half), min(high, m["mean_reward"] + half)])
        else:
            assert mine["interval"] is None
    assert reward_interval(0.5, 1, 0.0, 1.0) == [0.0, 1.0]


def test_page_and_assets_load_nothing_from_elsewhere(router_url):
    with httpx.Client(base_url=router_url, timeout=30) as http:
        page = http.get("/dashboard")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"] and "connect-src 'self'" in page.headers["content-security-policy"]
        dom = Dom(page.text)
        links = [a.get("src") or a.get("href") for t, a, _ in dom.find() if t in ("script", "link", "img", "a") and (a.get("src") or a.get("href"))]
        assert sorted(links) == ["/dashboard/static/dashboard.css", "/dashboard/static/dashboard.js"]
        for link, kind in zip(sorted(links), ("text/css", "text/javascript")):
            asset = http.get(link)
            assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
            # the only URL in the assets is the SVG namespace, which names, and loads nothing
            assert asset.text.replace("http://www.w3.org/2000/svg", "").count("http") == 0
        missing = http.get("/dashboard/static/secrets.txt")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_chromium_shows_the_numbers_of_v1_stats_and_draws_the_charts(router_url, tmp_path):
    html = chromium(f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom", f"{router_url}/dashboard#key=admin-key")
    stats = httpx.get(router_url + "/v1/stats", headers=READ, timeout=30).json()
    dom = Dom(html)
    assert dom.find(id="key-form")[0][1].get("hidden") is not None  # the key was taken from the address

    summary = {a["data-k"]: text for _, a, text in dom.find("dd")}
    assert summary["policy"] == stats["policy"] and summary["store"] == stats["store"] and summary["replica"] == stats["replica"]
    assert [int(summary[k]) for k in ("policy_rounds", "decisions", "feedback")] == [stats["policy_rounds"], stats["decisions"], stats["feedback"]]

    rows = {row[0][1]: {a["data-k"]: text for a, text in row} for row in dom.rows("models")}
    assert list(rows) == list(MODELS)
    low, high = 0.0, 1.0
    for m in stats["models"]:
        shown = rows[m["name"]]
        assert int(shown["pulls"]) == m["pulls"] and int(shown["feedback"]) == m["feedback"]
        assert float(shown["share"].rstrip("%")) == pytest.approx(100 * m["pulls"] / stats["decisions"], abs=0.05)
        assert float(shown["cost"]) == pytest.approx(m["cost"], rel=5e-3)
        assert float(shown["spend"]) == pytest.approx(m["pulls"] * m["cost"], rel=5e-3)
        if m["feedback"]:
            assert abs(float(shown["mean_reward"]) - m["mean_reward"]) <= 5e-5
            interval = [float(v) for v in shown["interval"].strip("[]").split(",")]
            assert interval == pytest.approx(reward_interval(m["mean_reward"], m["feedback"], low, high), abs=5e-5)
        else:
            assert shown["mean_reward"] == "-" and shown["interval"] == "-"

    recent = dom.rows("recent")
    assert len(recent) == 15
    for row, expected in zip(recent, stats["recent"]):
        assert row[1][1] == expected["model"] and row[4][1] == expected["decision_id"]
        assert row[2][1] == ("forced" if expected["forced"] else "routed")
        if expected["reward"] is None:
            assert row[3][1] == "-"
        else:
            assert abs(float(row[3][1]) - expected["reward"]) <= 5e-5

    # Each chart draws one line per model through the history's points (one per batch; the reward chart from a model's first feedback).
    series = httpx.get(router_url + "/dashboard/data", headers=READ, timeout=30).json()["series"]
    for chart in ("chart-decisions", "chart-reward", "chart-spend"):
        lines = {a["data-model"]: (int(a["data-points"]), a["points"]) for _, a, _ in dom.find("polyline", within=chart)}
        assert set(lines) == {m["name"] for m in stats["models"] if m["feedback"] or chart != "chart-reward"}, chart
        for name, (n, points) in lines.items():
            expected = sum(p["models"][name]["mean_reward"] is not None for p in series) if chart == "chart-reward" else BATCHES
            assert n == len(points.split()) == expected >= 2, (chart, name)
    assert sorted(a["data-model"] for _, a, _ in dom.find("polygon", within="chart-reward")) == sorted(m["name"] for m in stats["models"] if m["feedback"])


def test_chromium_asks_for_a_key_and_says_why(router_url, tmp_path):
    without = Dom(chromium(f"--user-data-dir={tmp_path / 'p1'}", "--virtual-time-budget=3000", "--dump-dom", f"{router_url}/dashboard"))
    assert without.find(id="key-form")[0][1].get("hidden") is None
    assert "Enter a key" in without.find(id="status")[0][2]
    wrong = Dom(chromium(f"--user-data-dir={tmp_path / 'p2'}", "--virtual-time-budget=3000", "--dump-dom", f"{router_url}/dashboard#key=wrong"))
    assert wrong.find(id="key-form")[0][1].get("hidden") is None
    assert wrong.find(id="status")[0][2].startswith("401:")
    assert not wrong.rows("models")


def test_chromium_screenshot_shows_the_series_colours(router_url, tmp_path):
    import matplotlib.image

    png = tmp_path / "dashboard.png"
    chromium(f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,1000", "--virtual-time-budget=5000",
             f"--screenshot={png}", f"{router_url}/dashboard#key=admin-key")
    pixels = (matplotlib.image.imread(png)[..., :3] * 255).round().astype(int)
    assert pixels.shape[:2] == (1000, 1280)
    for rgb in ((0x25, 0x63, 0xEB), (0xDC, 0x26, 0x26), (0x16, 0xA3, 0x4A)):  # the three models' colours
        assert (np.abs(pixels - rgb).sum(axis=2) <= 6).sum() > 200, rgb

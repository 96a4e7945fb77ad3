"""``genbandit serve --demo``: the logged upstream answers with the real table, and the router learns from it on loopback."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx")
pytest.importorskip("openai")
pytest.importorskip("fastapi")

import io
import re

import httpx
import openai

from genbandit.cli import main
from genbandit.envs.prompts import load_paretobandit
from genbandit.router.demo import LoggedOutcomes, run_demo, serve_in_thread, upstream_app
from router_helpers import free_port


@pytest.fixture(scope="module")
def table():
    return LoggedOutcomes.paretobandit()


def test_the_upstream_answers_each_model_with_its_logged_outcome(table):
    prompts, rewards, costs, model_ids, sources = load_paretobandit("all")
    assert table.prompts == prompts and table.model_ids == model_ids and len(prompts) > 3500
    with serve_in_thread(upstream_app(table)) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list()] == model_ids
        for row in (0, 1234, len(prompts) - 1):
            for g, model in enumerate(model_ids):
                answer = client.chat.completions.create(model=model, messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": prompts[row]}])
                assert answer.model == model
                assert answer.model_extra["genbandit_demo"] == {"reward": rewards[row, g], "cost": costs[row, g], "source": sources[row]}
                assert f"reward {rewards[row, g]:.2f}" in answer.choices[0].message.content

        stream = client.chat.completions.create(model=model_ids[1], messages=[{"role": "user", "content": prompts[7]}], stream=True)
        chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == f"The log holds no answer text, only what {model_ids[1]} scored on this {sources[7]} prompt: reward {rewards[7, 1]:.2f}, cost ${costs[7, 1]:.6f}."
        assert chunks[-1].choices[0].finish_reason == "stop"

        other = client.chat.completions.create(model=model_ids[0], messages=[{"role": "user", "content": "Not in the log."}])
        assert other.model_extra["genbandit_demo"] is None and "no logged outcome" in other.choices[0].message.content
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": prompts[0]}])
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model=model_ids[0], messages=[{"role": "assistant", "content": "no user message"}])
        for body in ("[1, 2]", "{not json"):
            refused = httpx.post(url + "/v1/chat/completions", content=body, headers={"content-type": "application/json"})
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"


def _progress(text: str, names: list[str]) -> list[dict]:
    rows = []
    for line in text.splitlines():
        m = re.fullmatch(r"\s*(\d+) \|\s+([\d.]+)\s+([\d.]+) \|(.*)\|(.*)", line)
        if m:
            alone = [float(v) for v in m.group(4).split()]
            shares = [float(v.rstrip("%")) / 100 for v in m.group(5).split()]
            rows.append({"requests": int(m.group(1)), "reward": float(m.group(2)), "per_1k": float(m.group(3)),
                         "alone_reward": dict(zip(names, alone[0::2])), "alone_per_1k": dict(zip(names, alone[1::2])), "share": dict(zip(names, shares))})
    return rows


def test_serve_demo_learns_routing_on_loopback(table, capsys):
    """The command a newcomer runs, shortened: 600 prompts through the router with the openai client."""
    port = free_port()
    assert main(["serve", "--demo", "--demo-exit", "--port", str(port), "--demo-requests", "600", "--demo-seconds", "300"]) == 0
    out = capsys.readouterr().out
    llama, mistral, gemini = table.names
    assert f"Router: http://127.0.0.1:{port}/v1   dashboard: http://127.0.0.1:{port}/dashboard#key=demo-" in out
    rows = _progress(out, table.names)
    assert [r["requests"] for r in rows] == list(range(50, 601, 50))
    first, last = rows[0], rows[-1]
    # What the router learned: away from the weak Llama, and onto Mistral (the best value once cost is priced in).
    decisions = dict(re.findall(r"(\S+) (\d+)", out.split("Decisions per model: ")[1].splitlines()[0]))
    assert sum(int(v) for v in decisions.values()) == 600 and "learned from 600 feedbacks" in out
    assert int(decisions[llama]) < 0.12 * 600 and int(decisions[mistral]) > 0.5 * 600
    assert last["share"][llama] <= first["share"][llama]
    # Its reward is close to the best single model's and far above Llama's, at a fraction of Gemini's spend.
    assert last["reward"] > last["alone_reward"][llama] + 0.08
    assert last["reward"] > max(last["alone_reward"].values()) - 0.04
    assert last["per_1k"] < 0.5 * last["alone_per_1k"][gemini]


def test_demo_with_the_minilm_embedding(table, tmp_path, monkeypatch):
    monkeypatch.setenv("GENBANDIT_CACHE", str(tmp_path))
    out = io.StringIO()
    played = run_demo(port=free_port(), requests=12, seconds=300, embedding="minilm", keep_serving=False, out=out)
    assert len(played["rows"]) == 12
    assert played["rewards"] == [table.rewards[r, a] for r, a in zip(played["rows"], played["arms"])]
    assert len(list((tmp_path / "router-demo").rglob("chunk-*.npz"))) >= 1  # its vectors are cached for the next run


@pytest.mark.parametrize(
    "argv, message",
    [
        (["serve", "--demo", "--config", "router.toml"], "--demo makes its own config"),
        (["serve", "--demo", "--host", "0.0.0.0"], "listens on 127.0.0.1 only"),
        (["serve"], "needs --config"),
        (["serve", "--demo", "--demo-requests", "0"], "plays 1 to"),
    ],
)
def test_serve_refuses_what_it_cannot_do(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err

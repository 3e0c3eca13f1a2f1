"""OpenAI request fields that do not change what the server computes are accepted (issue 28
item 5); those that would change it and are not implemented still get a 400 naming them;
`reasoning_effort` reaches the template's thinking switch; `prediction` feeds the drafts.

In-process apps (falcon.testing) on the shared stories260K."""

from __future__ import annotations

import pytest
from conftest import shared_path
from falcon import testing

from reame.engines import create_engine
from reame.reasoning import effort_kwargs
from reame.server import ServerConfig, create_app
from reame.speculate.control import StepCost

N_CTX = 256
HI = [{"role": "user", "content": "Once upon a time"}]


def make_app(model, tmp_path=None, engine="reference", **config):
    eng = create_engine(model, engine, n_ctx=N_CTX, max_seqs=4)
    config.setdefault("adaptive_boot", 0)
    if tmp_path is not None:
        config["adaptive_dir"] = str(tmp_path)
    return create_app(eng, ServerConfig(model=model.path, max_seqs=4, **config))


def stop(app):
    if app.reame.service is not None:
        app.reame.service.stop()


@pytest.fixture(scope="module")
def client(stories_model):
    app = make_app(stories_model)
    yield testing.TestClient(app)
    stop(app)


def post(client, body, path="/v1/chat/completions"):
    body = {"messages": HI, "max_tokens": 2, **body}
    if path != "/v1/chat/completions":
        body.pop("messages")
        body["prompt"] = "Once"
    return client.simulate_post(path, json=body)


BOOKKEEPING = {"prompt_cache_key": "session-42", "safety_identifier": "u-hash", "user": "u-1",
               "metadata": {"k": "v"}, "store": False, "service_tier": "auto",
               "modalities": ["text"], "verbosity": "low", "reasoning_effort": "high",
               "prediction": {"type": "content", "content": "Once upon a time"}}
TOOLS = [{"type": "function", "function": {"name": "f"}}]


def test_harmless_openai_fields_are_accepted_and_change_nothing(client):
    """Every bookkeeping field of an OpenAI chat request at once is a 200, and greedy output
    equals the bare request's. Catches the old schema that refused `reasoning_effort`,
    `prompt_cache_key`, `safety_identifier`, `verbosity`, `modalities` and `prediction` with
    400 unsupported_parameter, and `tool_choice: null` with tools ("'tool_choice' must be
    'auto', ...")."""
    bare = post(client, {"temperature": 0, "max_tokens": 8})
    assert bare.status_code == 200, bare.text
    r = post(client, {**BOOKKEEPING, "temperature": 0, "max_tokens": 8})
    assert r.status_code == 200, r.text
    assert r.json["choices"][0]["message"]["content"] == \
        bare.json["choices"][0]["message"]["content"]
    for field in ("prompt_cache_key", "safety_identifier", "user", "metadata", "store",
                  "service_tier"):            # on completions too
        r = post(client, {field: BOOKKEEPING[field]}, "/v1/completions")
        assert r.status_code == 200, (field, r.text)
    r = post(client, {"tools": TOOLS, "tool_choice": None, "parallel_tool_calls": None})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("field,value,code", [
    ("modalities", ["text", "audio"], "unsupported_parameter"),
    ("reasoning_effort", "extreme", None),
    ("verbosity", "loud", None),
    ("prediction", {"type": "content"}, None),
    ("prediction", {"type": "content", "content": [{"type": "image_url"}]}, "unsupported_content"),
    ("prompt_cache_key", 42, None),
    ("metadata", {"k": 1}, None),
    ("store", "no", None),
    ("mirostat", 2, "unsupported_parameter"),
    ("audio", {"voice": "alloy"}, "unsupported_parameter"),
])
def test_fields_that_would_change_results_or_are_malformed_get_a_400(client, field, value, code):
    """Other modalities than text, unknown effort or verbosity values, a malformed prediction,
    wrongly typed bookkeeping, and fields that change results (mirostat, audio output) are a
    400 naming the field. Catches a schema that accepts every value of an accepted field."""
    r = post(client, {field: value})
    assert r.status_code == 400, r.text
    err = r.json["error"]
    assert err["param"].split(".")[0] == field, err
    if code is not None:
        assert err["code"] == code, err


def test_reasoning_effort_and_prediction_are_chat_only(client):
    """Catches accepting chat-only fields on /v1/completions, where they could mean nothing."""
    for field in ("reasoning_effort", "prediction", "modalities", "verbosity"):
        r = post(client, {field: BOOKKEEPING[field]}, "/v1/completions")
        assert r.status_code == 400 and r.json["error"]["param"] == field, (field, r.text)


def test_effort_maps_onto_each_templates_switch():
    """none/minimal turn thinking off, the other efforts on, through the variable the template
    reads; a template without a switch gets nothing. Catches mapping every effort to on, or
    passing enable_thinking to templates that read another name."""
    qwen3 = shared_path("testdata/templates/Qwen-Qwen3-0.6B.jinja").read_text()
    granite = shared_path("testdata/templates/ibm-granite-granite-3.3-2B-Instruct.jinja").read_text()
    llama = shared_path("testdata/templates/meta-llama-Llama-3.1-8B-Instruct.jinja").read_text()
    assert effort_kwargs(qwen3, "none") == {"enable_thinking": False}
    assert effort_kwargs(qwen3, "minimal") == {"enable_thinking": False}
    assert effort_kwargs(qwen3, "low") == {"enable_thinking": True}
    assert effort_kwargs(granite, "high") == {"thinking": True}
    assert effort_kwargs(granite, "none") == {"thinking": False}
    assert effort_kwargs(llama, "none") == {}
    gpt_oss = "{%- if reasoning_effort is defined %}Reasoning: {{ reasoning_effort }}{% endif %}"
    assert effort_kwargs(gpt_oss, "none") == {"reasoning_effort": "low"}
    assert effort_kwargs(gpt_oss, "medium") == {"reasoning_effort": "medium"}


def test_reasoning_effort_reaches_the_template(stories_model):
    """With Qwen3's template, reasoning_effort "none" renders the empty think block that
    enable_thinking false renders (more prompt tokens than "high"), and an explicit
    chat_template_kwargs wins over the effort. Catches an effort that is accepted but never
    reaches the template."""
    app = make_app(stories_model, chat_template_file=str(
        shared_path("testdata/templates/Qwen-Qwen3-0.6B.jinja")))
    c = testing.TestClient(app)
    try:
        def prompt_tokens(**kw):
            r = post(c, {"max_tokens": 1, **kw})
            assert r.status_code == 200, r.text
            return r.json["usage"]["prompt_tokens"]
        off = prompt_tokens(chat_template_kwargs={"enable_thinking": False})
        on = prompt_tokens()
        assert off > on
        assert prompt_tokens(reasoning_effort="none") == off
        assert prompt_tokens(reasoning_effort="minimal") == off
        assert prompt_tokens(reasoning_effort="high") == on
        assert prompt_tokens(reasoning_effort="none",
                             chat_template_kwargs={"enable_thinking": True}) == on
    finally:
        stop(app)


class FlatCost(StepCost):
    """A step costs the same whatever its tokens (a big model on a memory-bound CPU): drafting
    always pays, so only the drafts' sources decide what is accepted."""

    def observe(self, n_tokens, seconds):
        pass

    def known(self):
        return True

    def __call__(self, n):
        return 1.0

    def curve(self):
        return {}


def test_prediction_feeds_the_drafts(stories_model, tmp_path):
    """Predicted Outputs under --speculate on: a prediction equal to the greedy answer is
    drafted from (most of the answer's tokens are accepted drafts) and the answer is unchanged;
    without a prediction (and without learning from earlier requests) far fewer drafts are
    accepted. Catches a prediction that is accepted but never reaches the speculator."""
    app = make_app(stories_model, tmp_path, engine="jit", speculate="on")
    sp = app.reame.service.speculator
    sp.learn = False                        # each request drafts from itself (and its prediction)
    sp.cost = FlatCost()                    # stories260K's steps are too cheap to draft for
    c = testing.TestClient(app)
    body = {"max_tokens": 48, "temperature": 0, "logit_bias": {"2": -100}}
    try:
        r = post(c, body)
        assert r.status_code == 200, r.text
        want = r.json["choices"][0]["message"]["content"]
        plain = sp.accepted_tokens
        r = post(c, {**body, "prediction": {"type": "content", "content": want}})
        assert r.status_code == 200, r.text
        assert r.json["choices"][0]["message"]["content"] == want
        predicted = sp.accepted_tokens - plain
        assert predicted >= 24 and predicted > 2 * plain, (plain, predicted)
    finally:
        stop(app)

"""The request models of reame/server/schemas.py (issue 28 item 7): what the declared fields
changed, and the null rule they rest on. Pure functions, no model.

The params and messages of every other 400 are asserted through HTTP in test_server_unit.py
(INVALID), test_openai_fields.py and the Responses / Messages tests."""

from __future__ import annotations

import pytest

from reame.server.schemas import (APIError, ChatBody, CompletionBody, parse_chat,
                                  parse_completion, parse_tokenize)

N_VOCAB, MAX_N = 512, 4
HI = {"messages": [{"role": "user", "content": "Hi"}]}


def error(parse, body, *args) -> APIError:
    with pytest.raises(APIError) as e:
        parse(body, *args)
    assert e.value.status == 400 and e.value.type == "invalid_request_error"
    return e.value


@pytest.mark.parametrize("model,parse,base", [(ChatBody, parse_chat, HI),
                                              (CompletionBody, parse_completion, {"prompt": "x"})])
def test_null_is_the_default_of_every_declared_field(model, parse, base):
    """Every declared field but the required one may be null, and null is the default (the
    request equals the one without it). Catches a field declared with a default but without
    the null rule (a 400 for `"top_k": null`, which clients send)."""
    want = parse(base, N_VOCAB, MAX_N)
    required = "messages" if model is ChatBody else "prompt"
    for name in model.model_fields:
        if name != required:
            assert parse({**base, name: None}, N_VOCAB, MAX_N) == want, name


def test_an_unknown_field_is_refused_even_when_null():
    """Only declared fields are dropped when null: `"mirostat": null` still names mirostat.
    Catches dropping every null before the unknown-field check."""
    e = error(parse_chat, {**HI, "mirostat": None}, N_VOCAB, MAX_N)
    assert (e.param, e.code) == ("mirostat", "unsupported_parameter")
    e = error(parse_chat, {**HI, "top_k": None, "zz": 1, "aa": 2}, N_VOCAB, MAX_N)
    assert e.param == "zz"                    # the first unknown field of the body


def test_types_are_now_checked_on_cache_prompt_and_tokenize_prompt():
    """Newly refused: a cache_prompt that is not a boolean (was accepted unless false), and a
    tokenize `prompt` that is not a string beside a `content` (was not looked at)."""
    e = error(parse_chat, {**HI, "cache_prompt": "yes"}, N_VOCAB, MAX_N)
    assert e.param == "cache_prompt" and "boolean" in e.message
    assert parse_chat({**HI, "cache_prompt": True}, N_VOCAB, MAX_N).messages
    e = error(parse_tokenize, {"content": "a", "prompt": 5})
    assert e.param == "prompt" and "string" in e.message


def test_integral_numbers_are_integers():
    """2.0 is the integer 2 (JSON does not tell them apart), as before the models. Catches a
    strict pydantic int without the conversion (2.5, "2" and true are refused: INVALID)."""
    r = parse_completion({"prompt": "x", "n": 2.0, "max_tokens": 3.0}, N_VOCAB, MAX_N)
    assert (r.n, r.max_tokens) == (2, 3) and type(r.n) is int


def test_a_number_too_large_for_a_float_is_a_400():
    """An integer literal beyond the float range (400 digits) in a number field is a 400 naming
    the field; it was an OverflowError (a 500) in the hand-written checks."""
    for field, value in (("temperature", 10**400), ("logit_bias", {"5": 10**400})):
        e = error(parse_completion, {"prompt": "x", field: value}, N_VOCAB, MAX_N)
        assert e.param == field, e.message
    assert "finite" in error(parse_completion, {"prompt": "x", "temperature": 10**400},
                             N_VOCAB, MAX_N).message

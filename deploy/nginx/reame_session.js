// The session key of a request to Reame, for `hash $reame_session consistent` in
// reame-scaleout-njs.conf: the first of
//
//   1. the X-Session-Id header;
//   2. the body's `prompt_cache_key` (OpenAI: requests that share it share cached prefixes);
//   3. the body's `metadata.user_id` (Anthropic's Messages API, POST /v1/messages);
//   4. the body's `user`, else its `safety_identifier` (OpenAI's end-user ids);
//   5. the client's address.
//
// The order goes from the most deliberate choice to the coarsest guess. The header is set by
// whoever deploys the client, costs no parsing, is what reame-scaleout.conf routes on too (a
// client sending it routes the same behind either site), and is the only key a request without
// a body (GET /v1/responses/{id}) can carry. prompt_cache_key exists for exactly this (OpenAI
// made it replace `user` for cache routing), so it beats the user ids when both are sent.
// metadata.user_id is the one key an Anthropic client has (the Messages API has no `user`;
// Claude Code puts its session id in it); an OpenAI body rarely carries it, and where it does
// it names a user as `user` does. `user` goes before `safety_identifier`, its successor, so
// that clients sending both stay where this script routed them before it read the latter.
// The key is the string alone, whatever field carries it: `X-Session-Id: K` and
// `"prompt_cache_key": "K"` reach the same replica. docs/deploy.md (Scale-out) says more,
// /v1/responses conversations included (previous_response_id cannot be a key: the first
// request of a chain has none).
//
// njs >= 0.5 (Debian: libnginx-mod-http-js). nginx evaluates the key when it picks a replica,
// after it has read the whole body. The body is readable here only while it is in memory
// (client_body_buffer_size): a larger one is in a temporary file, and such a request falls back
// to the client's address.

// A body is parsed only if one of the names appears as a key (quoted, then a colon): a quote
// inside a JSON string is escaped, so `"role": "user"`, in every chat body, does not count.
var KEY_NAMES = /"(?:prompt_cache_key|user_id|user|safety_identifier)"\s*:/;

function text(v) {
    return typeof v === 'string' && v ? v : null;
}

function bodyKey(body) {
    var b = JSON.parse(body);
    if (!b || typeof b !== 'object') {
        return null;
    }
    var meta = b.metadata;
    return text(b.prompt_cache_key)
        || (meta && typeof meta === 'object' ? text(meta.user_id) : null)
        || text(b.user)
        || text(b.safety_identifier);
}

function key(r) {
    var header = r.headersIn['X-Session-Id'];
    if (header) {
        return header;
    }
    try {
        var body = r.requestText;
        if (body && KEY_NAMES.test(body)) {
            var k = bodyKey(body);
            if (k) {
                return k;
            }
        }
    } catch (e) {
        // a body in a file, or not JSON: Reame answers the latter with a 400 anyway
    }
    return r.remoteAddress;
}

export default {key};

// The model key of a request to Reame, for reame-models.conf: the first of
//
//   1. the body's `model` (a non-empty string);
//   2. the X-Reame-Model header;
//   3. "" (no model named), which reame-models.conf's map turns into the first model's id.
//
// The body's `model` is what the replica serves the request with (and loads if it has to), so
// it is the key whenever there is one: a header can only disagree with it, and a request routed
// by a header that names another model would load a second copy of its real model on the
// header's replica. The header is for requests without a body that must reach a model's
// replica: GET and DELETE /v1/responses/{id} (a response is stored in the memory of the replica
// that answered it, which is its model's). A request naming no model gets the empty string
// rather than the client's address: Reame serves it with its first model, whose replica the
// map names, so `{}` and `{"model": "<first model's id>"}` share a replica; an empty key
// would make `hash` fall back to round robin, hence the map. Sessions and users are ignored on
// purpose: keying on them too would spread every model over every replica, each loading it
// (reame-models.conf shows how to do that for one busy model only).
//
// njs >= 0.5 (Debian: libnginx-mod-http-js). nginx evaluates the key when it picks a replica,
// after it has read the whole body. The body is readable here only while it is in memory
// (client_body_buffer_size): a larger one is in a temporary file, and such a request is routed
// by the header, else as one naming no model (its answer is right, but its model may be
// loaded on a second replica).

// A body is parsed only if `model` appears in it as a key (quoted, then a colon: a quote inside
// a JSON string is escaped, so a prompt that mentions "model" does not count). Nearly every
// body has one; the cost is a JSON.parse per request, small beside a generation.
var MODEL_KEY = /"model"\s*:/;

function model(r) {
    try {
        var body = r.requestText;
        if (body && MODEL_KEY.test(body)) {
            var b = JSON.parse(body);
            // only the top-level `model`: a tool's or a schema's property named "model" is not
            if (b && typeof b === 'object' && typeof b.model === 'string' && b.model) {
                return b.model;
            }
        }
    } catch (e) {
        // a body in a file, or not JSON: Reame answers the latter with a 400 anyway
    }
    return r.headersIn['X-Reame-Model'] || '';
}

export default {model};

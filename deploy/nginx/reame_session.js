// The session key of a request to Reame, for `hash $reame_session consistent` in
// reame-scaleout-njs.conf: the X-Session-Id header, else the OpenAI `user` field of the JSON
// body, else the client's address. njs >= 0.5 (Debian: libnginx-mod-http-js).
//
// nginx evaluates the key when it picks a replica, after it has read the whole body. The body is
// readable here only while it is in memory (client_body_buffer_size): a larger one is in a
// temporary file, and such a request falls back to the client's address.

function key(r) {
    var header = r.headersIn['X-Session-Id'];
    if (header) {
        return header;
    }
    try {
        var body = r.requestText;
        // most bodies have no `user`: do not parse those
        if (body && body.indexOf('"user"') >= 0) {
            var user = JSON.parse(body).user;
            if (typeof user === 'string' && user) {
                return user;
            }
        }
    } catch (e) {
        // a body in a file, or not JSON: Reame answers the latter with a 400 anyway
    }
    return r.remoteAddress;
}

export default {key};

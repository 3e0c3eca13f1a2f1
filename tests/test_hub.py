"""Models by name (reame/hub.py) against a fake Hugging Face Hub: a small HTTP server in this
process that answers the requests huggingface_hub makes (the file list: GET
/api/models/ORG/REPO/tree/REV; a file: HEAD and GET /ORG/REPO/resolve/REV/PATH with ETag and
X-Repo-Commit; errors with the Hub's X-Error-Code header), with HF_ENDPOINT pointing at it and the
cache in a temporary folder. No network."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

import pytest

from reame import progress
from reame.cli import main
from reame.errors import ReameError
from reame.hub import choose_file, parse_model_name, resolve_model, split_parts

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """repos: {"org/name": {path: bytes}}; gated / private: repo ids that need `token`."""

    def __init__(self, repos, gated=(), private=(), token="hf_secret"):
        self.repos, self.gated, self.private, self.token = repos, set(gated), set(private), token
        self.requests: list[tuple[str, str, dict]] = []
        hub_ = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub_.answer(self, body=False)

            def do_GET(self):
                hub_.answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def downloads(self, path_end: str) -> int:
        """GET requests for a file whose path ends with path_end."""
        return sum(1 for m, p, _ in self.requests if m == "GET" and "/resolve/" in p
                   and p.endswith(path_end))

    def answer(self, h: BaseHTTPRequestHandler, body: bool):
        path = unquote(urlsplit(h.path).path)
        self.requests.append((h.command, path, {k.lower(): v for k, v in h.headers.items()}))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "tree":
            repo, kind, rest = "/".join(parts[2:4]), "tree", None
        elif len(parts) >= 5 and parts[2] == "resolve":
            repo, kind, rest = "/".join(parts[:2]), "file", "/".join(parts[4:])
        else:
            return self.send(h, 404, b"", {"X-Error-Code": "RepoNotFound"}, body)
        files = self.repos.get(repo)
        authorized = h.headers.get("Authorization") == f"Bearer {self.token}"
        if files is None or (repo in self.private and not authorized):
            return self.send(h, 401 if repo in self.private else 404, b'{"error": "not found"}',
                             {"X-Error-Code": "RepoNotFound"}, body)
        if repo in self.gated and not authorized:
            return self.send(h, 403, b'{"error": "gated"}', {"X-Error-Code": "GatedRepo"}, body)
        if kind == "tree":
            listing = [{"type": "file", "path": p, "size": len(d),
                        "oid": hashlib.sha1(d).hexdigest()} for p, d in sorted(files.items())]
            return self.send(h, 200, json.dumps(listing).encode(),
                             {"Content-Type": "application/json"}, body)
        data = files.get(rest)
        if data is None:
            return self.send(h, 404, b'{"error": "entry not found"}',
                             {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT}, body)
        return self.send(h, 200, data, {"ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                                        "X-Repo-Commit": COMMIT,
                                        "Content-Type": "application/octet-stream"}, body)

    @staticmethod
    def send(h, status, data, headers, body):
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if body:
            h.wfile.write(data)


def gguf_like(tag: str) -> bytes:
    return b"GGUF" + tag.encode() * 50


REPOS = {
    "org/tiny-GGUF": {"tiny-Q8_0.gguf": gguf_like("q8"), "tiny-Q4_K_M.gguf": gguf_like("q4km"),
                      "tiny-Q4_K_S.gguf": gguf_like("q4ks"), "mmproj-tiny-f16.gguf": b"proj",
                      "README.md": b"# tiny"},
    "org/one": {"only.gguf": gguf_like("only"), "config.json": b"{}"},
    "org/split": {f"big-Q8_0-0000{i}-of-00003.gguf": gguf_like(f"part{i}") for i in (1, 2, 3)},
    "org/many": {"m-Q8_0.gguf": b"GGUF8", "m-F16.gguf": b"GGUF16"},
    "org/gated": {"g-Q4_K_M.gguf": gguf_like("gated")},
    "org/private": {"p.gguf": gguf_like("private")},
    "org/none": {"model.safetensors": b"x"},
}


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    h = FakeHub(REPOS, gated={"org/gated"}, private={"org/private"})
    monkeypatch.setenv("HF_ENDPOINT", h.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    for var in ("HF_TOKEN", "HF_HOME", "HF_HUB_OFFLINE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")   # never the developer's own token
    yield h
    h.stop()


# ---- names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("arg,want", [
    ("Qwen/Qwen2.5-0.5B-Instruct-GGUF", ("Qwen/Qwen2.5-0.5B-Instruct-GGUF", None, None, None)),
    ("org/repo:Q4_K_M", ("org/repo", None, None, "Q4_K_M")),
    ("org/repo@v1.0:q8_0", ("org/repo", "v1.0", None, "q8_0")),
    ("hf://org/repo/sub/m-Q8_0.gguf", ("org/repo", None, "sub/m-Q8_0.gguf", None)),
    ("hf://org/repo@abc123/m.gguf", ("org/repo", "abc123", "m.gguf", None)),
    ("hf://org/repo:IQ4_XS", ("org/repo", None, None, "IQ4_XS")),
    ("hf://org/repo", ("org/repo", None, None, None)),
    ("models/m.gguf", None), ("./org/repo", None), ("/abs/org/repo", None),
    ("a/b/c", None), ("model.gguf", None), ("plainname", None), ("~/org/repo", None),
])
def test_parse_model_name(arg, want):
    assert parse_model_name(arg) == want


def test_malformed_url_is_an_error():
    with pytest.raises(ReameError, match="not a Hugging Face model URL"):
        parse_model_name("hf://org")


def test_choose_file():
    files = list(REPOS["org/tiny-GGUF"])
    assert choose_file("r", files, None) == "tiny-Q4_K_M.gguf"          # the default quant
    assert choose_file("r", files, "q8_0") == "tiny-Q8_0.gguf"          # case-insensitive
    assert choose_file("r", files, "Q4_K_S") == "tiny-Q4_K_S.gguf"
    with pytest.raises(ReameError, match="no GGUF file with quant Q4_K .*tiny-Q4_K_M.gguf"):
        choose_file("r", files, "Q4_K")                                  # a whole word only
    assert choose_file("r", list(REPOS["org/one"]), None) == "only.gguf"  # the only one
    with pytest.raises(ReameError) as e:
        choose_file("org/many", list(REPOS["org/many"]), None)
    assert str(e.value) == ("org/many has 2 GGUF files, choose one with org/many:QUANT: "
                            "m-F16.gguf, m-Q8_0.gguf")
    split = list(REPOS["org/split"]) + ["Q4_K_M/x-Q4_K_M-00001-of-00002.gguf",
                                        "Q4_K_M/x-Q4_K_M-00002-of-00002.gguf"]
    assert choose_file("r", split, "q8_0") == "big-Q8_0-00001-of-00003.gguf"
    assert choose_file("r", split, None) == "Q4_K_M/x-Q4_K_M-00001-of-00002.gguf"
    with pytest.raises(ReameError, match="no GGUF file"):
        choose_file("org/none", list(REPOS["org/none"]), None)
    with pytest.raises(ReameError, match="several GGUF files match Q8_0: a/m-Q8_0.gguf, b/m-Q8_0"):
        choose_file("r", ["a/m-Q8_0.gguf", "b/m-Q8_0.gguf"], "Q8_0")


def test_split_parts():
    assert split_parts("d/x-Q8_0-00002-of-00003.gguf") == [
        "d/x-Q8_0-00001-of-00003.gguf", "d/x-Q8_0-00002-of-00003.gguf",
        "d/x-Q8_0-00003-of-00003.gguf"]
    assert split_parts("x.gguf") == ["x.gguf"]


# ---- paths --------------------------------------------------------------------------------------

def test_existing_path_is_itself(tmp_path, monkeypatch):
    p = tmp_path / "org"
    (p / "repo").mkdir(parents=True)
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    assert resolve_model(str(f)) == str(f)
    monkeypatch.chdir(tmp_path)
    assert resolve_model("org/repo") == "org/repo"            # a path that exists wins over a name
    with pytest.raises(ReameError, match=r"^nope/m.gguf: No such file or directory$"):
        resolve_model("nope/m.gguf")


def test_without_huggingface_hub(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)   # import fails
    with pytest.raises(ReameError) as e:
        resolve_model("org/tiny-GGUF")
    assert str(e.value) == ("loading a model by name needs huggingface_hub: "
                            "pip install 'reame[hub]'")
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    assert resolve_model(str(f)) == str(f)                    # paths need no extra


# ---- downloads ----------------------------------------------------------------------------------

def test_download_by_name_into_the_cache(fake_hub, tmp_path):
    path = resolve_model("org/tiny-GGUF")
    assert open(path, "rb").read() == REPOS["org/tiny-GGUF"]["tiny-Q4_K_M.gguf"]
    assert path.startswith(str(tmp_path / "cache" / "models--org--tiny-GGUF" / "snapshots"))
    assert fake_hub.downloads("tiny-Q4_K_M.gguf") == 1
    assert fake_hub.downloads("tiny-Q8_0.gguf") == 0 and fake_hub.downloads("README.md") == 0
    q8 = resolve_model("org/tiny-GGUF:q8_0")
    assert open(q8, "rb").read() == REPOS["org/tiny-GGUF"]["tiny-Q8_0.gguf"]
    url = resolve_model("hf://org/tiny-GGUF/tiny-Q4_K_S.gguf")
    assert open(url, "rb").read() == REPOS["org/tiny-GGUF"]["tiny-Q4_K_S.gguf"]
    # a second time: from the cache (a HEAD to check it is current, no download)
    assert resolve_model("org/tiny-GGUF") == path
    assert fake_hub.downloads("tiny-Q4_K_M.gguf") == 1


def test_hf_home_is_honoured(fake_hub, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    path = resolve_model("org/one")
    assert path.startswith(str(tmp_path / "home" / "hub" / "models--org--one"))


def test_cached_model_resolves_without_the_hub(fake_hub, monkeypatch):
    path = resolve_model("org/tiny-GGUF:Q8_0")
    fake_hub.stop()                                       # the Hub goes away
    assert resolve_model("org/tiny-GGUF:Q8_0") == path    # listed and found in the cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model("org/tiny-GGUF:Q8_0") == path
    with pytest.raises(ReameError, match="org/one: not in the local cache and HF_HUB_OFFLINE"):
        resolve_model("org/one")


def test_unreachable_hub_and_nothing_cached(fake_hub, monkeypatch):
    fake_hub.stop()
    with pytest.raises(ReameError) as e:
        resolve_model("org/one")
    assert str(e.value) == (f"org/one: cannot reach {fake_hub.url} and the file is not in the "
                            "local cache")


def test_split_model_downloads_every_part(fake_hub):
    first = resolve_model("org/split:Q8_0")
    assert first.endswith("big-Q8_0-00001-of-00003.gguf")
    folder = os.path.dirname(first)
    for i in (1, 2, 3):
        name = f"big-Q8_0-0000{i}-of-00003.gguf"
        assert open(os.path.join(folder, name), "rb").read() == REPOS["org/split"][name]
    assert resolve_model("hf://org/split/big-Q8_0-00003-of-00003.gguf") == first


@pytest.mark.parametrize("arg,message", [
    ("org/nope", f"org/nope: no such file, and no such model repository on {{url}} "
                 "(a private one needs HF_TOKEN)"),
    ("org/private", "org/private: no such file, and no such model repository on {url} "
                    "(a private one needs HF_TOKEN)"),
    ("org/gated", "org/gated: the repository is gated: accept its terms on {url} and set HF_TOKEN"),
    ("hf://org/one/missing.gguf", "hf://org/one/missing.gguf: no such file in the repository"),
    ("org/many", "org/many has 2 GGUF files, choose one with org/many:QUANT: m-F16.gguf, "
                 "m-Q8_0.gguf"),
    ("org/tiny-GGUF:Q2_K", "org/tiny-GGUF: no GGUF file with quant Q2_K (files: tiny-Q4_K_M.gguf, "
                           "tiny-Q4_K_S.gguf, tiny-Q8_0.gguf)"),
])
def test_errors_are_one_line(fake_hub, arg, message):
    with pytest.raises(ReameError) as e:
        resolve_model(arg)
    assert str(e.value) == message.format(url=fake_hub.url)


def test_token_opens_private_and_gated_repos(fake_hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    assert open(resolve_model("org/private"), "rb").read() == REPOS["org/private"]["p.gguf"]
    assert open(resolve_model("org/gated"), "rb").read() == REPOS["org/gated"]["g-Q4_K_M.gguf"]
    sent = {h.get("authorization") for _, p, h in fake_hub.requests if "private" in p}
    assert sent == {"Bearer hf_secret"}


def test_download_progress(fake_hub, monkeypatch, capsys):
    """The download reports through reame.progress (a log line per quarter when not a tty)."""
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.setenv("REAME_PROGRESS", "log")
    resolve_model("org/one")
    err = capsys.readouterr().err
    size = len(REPOS["org/one"]["only.gguf"])
    assert f"reame: downloading only.gguf: done ({size} B in " in err, err
    assert "\r" not in err
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")    # huggingface_hub's own switch
    resolve_model("hf://org/tiny-GGUF/tiny-Q8_0.gguf")
    assert capsys.readouterr().err == ""


# ---- the CLI -------------------------------------------------------------------------------------

@pytest.fixture
def hub_with_stories(monkeypatch, tmp_path, stories_path):
    h = FakeHub({"tiny/stories-GGUF": {"stories260K-Q8_0.gguf": stories_path.read_bytes()}})
    monkeypatch.setenv("HF_ENDPOINT", h.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    yield h
    h.stop()


def test_cli_commands_take_names(hub_with_stories, capsys, tmp_path):
    assert main(["info", "tiny/stories-GGUF", "--json"]) == 0
    out, err = capsys.readouterr()
    info = json.loads(out)
    assert info["file"].startswith(str(tmp_path / "cache" / "models--tiny--stories-GGUF"))
    assert info["architecture"] == "llama"
    assert main(["tokenize", "hf://tiny/stories-GGUF/stories260K-Q8_0.gguf", "Once upon",
                 "--ids-only"]) == 0
    assert capsys.readouterr().out.strip()
    assert main(["generate", "tiny/stories-GGUF:Q8_0", "--prompt", "Once upon a time",
                 "--max-tokens", "4", "--temperature", "0", "--engine", "reference", "-q"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() and err == ""


def test_cli_errors_are_one_line(hub_with_stories, capsys):
    assert main(["info", "tiny/nope"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("reame: error: tiny/nope: no such file, and no such model repository")

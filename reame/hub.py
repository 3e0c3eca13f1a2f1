"""Models by name: `org/repo[:QUANT]` or `hf://org/repo/FILE.gguf` -> a local GGUF file, downloaded
from the Hugging Face Hub into its cache (through `huggingface_hub`, the optional `hub` extra:
`pip install 'reame[hub]'`).

    resolve_model("models/m.gguf")                        # an existing path: itself
    resolve_model("Qwen/Qwen2.5-0.5B-Instruct-GGUF")      # the repo's Q4_K_M file, or its only GGUF
    resolve_model("Qwen/Qwen2.5-0.5B-Instruct-GGUF:q8_0") # the file whose name has that quant
    resolve_model("hf://org/repo/sub/model-Q8_0.gguf")    # that file
    resolve_model("org/repo@v1.0:Q4_K_M")                 # at a revision (branch, tag or commit)

Choosing the file: the repo's `.gguf` files, without vision projectors (`mmproj*`) and with a
split model (`NAME-00001-of-00003.gguf`, ...) counted once. With a QUANT, the files whose path has
it as a whole word (case-insensitive; `Q4_K` does not pick `Q4_K_M`); without one, the only file,
else the Q4_K_M file (llama.cpp's default), else an error listing the choices. Every part of a
split model is downloaded (into one folder) and the first part's path returned. (Reame's loader
reads single-file GGUFs only, so a split model does not load yet: merge it with llama.cpp's
`llama-gguf-split --merge`.)

Downloads honour the usual huggingface_hub settings: HF_ENDPOINT (another Hub or a mirror),
HF_HOME / HF_HUB_CACHE (where files go), HF_TOKEN (private and gated repos), HF_HUB_OFFLINE.
A file already in the cache is not downloaded again; when the Hub cannot be reached, a name is
resolved from what the cache holds. Progress goes through `reame.progress`.
"""

from __future__ import annotations

import os
import re

from .errors import ReameError

INSTALL_HINT = "pip install 'reame[hub]'"
DEFAULT_QUANT = "Q4_K_M"
DEFAULT_ENDPOINT = "https://huggingface.co"

_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
# org/repo[@revision][:QUANT]      and      hf://org/repo[@revision][/path/FILE.gguf | :QUANT]
_NAME = re.compile(rf"(?P<repo>{_PART}/{_PART})(?:@(?P<rev>[^:/@\s]+))?(?::(?P<quant>[\w.-]+))?")
_URL = re.compile(rf"hf://(?P<repo>{_PART}/{_PART})(?:@(?P<rev>[^:/@\s]+))?"
                  rf"(?:/(?P<file>[^\s]+\.gguf)|:(?P<quant>[\w.-]+))?/?")
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$", re.IGNORECASE)


def parse_model_name(arg: str) -> tuple[str, str | None, str | None, str | None] | None:
    """(repo, revision, file, quant) when `arg` names a Hub model, else None (a path).

    A name is `org/repo` with an optional `@revision` and `:QUANT`, or an `hf://` URL; anything
    that ends in .gguf, starts like a path (`/`, `.`, `~`) or has more slashes is a path."""
    if arg.startswith("hf://"):
        m = _URL.fullmatch(arg)
        if m is None:
            raise ReameError(f"{arg}: not a Hugging Face model URL "
                             "(hf://org/repo, hf://org/repo:QUANT or hf://org/repo/FILE.gguf)")
        return m["repo"], m["rev"], m["file"], m["quant"]
    if arg.lower().endswith(".gguf") or arg[:1] in "/.~" or os.sep != "/" and os.sep in arg:
        return None
    m = _NAME.fullmatch(arg)
    if m is None or m["repo"].endswith(".") or ".." in m["repo"]:
        return None
    return m["repo"], m["rev"], None, m["quant"]


def resolve_model(arg: str) -> str:
    """A local GGUF path for `arg`: an existing path is returned as is; a Hub name or hf:// URL is
    downloaded (if not cached) and its local path returned. ReameError (one line) on failure."""
    if os.path.exists(arg):
        return arg
    parsed = parse_model_name(arg)
    if parsed is None:
        raise ReameError(f"{arg}: No such file or directory")
    repo, revision, filename, quant = parsed
    hub = _import_hub()
    settings = _settings()
    try:
        if filename is None:
            files = _list_gguf(hub, repo, revision, settings)
            filename = choose_file(repo, files, quant)
        paths = [_download(hub, repo, f, revision, settings) for f in split_parts(filename)]
    except ReameError:
        raise
    except Exception as e:                   # huggingface_hub's errors, network errors, OSError
        raise ReameError(_explain(e, arg, settings)) from None
    return paths[0]


# -- choosing the file ---------------------------------------------------------------------------

def split_parts(filename: str) -> list[str]:
    """All parts of a split GGUF given any one of them (a single file: itself)."""
    m = _SPLIT.match(filename)
    if m is None:
        return [filename]
    n = int(m["n"])
    return [f"{m['stem']}-{i:05d}-of-{m['n']}.gguf" for i in range(1, n + 1)]


def _candidates(files: list[str]) -> list[str]:
    """The models among a repo's files: .gguf files but projectors, a split model once (its
    first part)."""
    out = []
    for f in sorted(files):
        base = f.rsplit("/", 1)[-1]
        if not base.lower().endswith(".gguf") or base.lower().startswith("mmproj"):
            continue
        m = _SPLIT.match(f)
        if m is not None and int(m["i"]) != 1:
            continue
        out.append(f)
    return out


def choose_file(repo: str, files: list[str], quant: str | None) -> str:
    """The file `repo:quant` means among the repo's `files` (see the module docstring)."""
    cands = _candidates(files)
    if not cands:
        raise ReameError(f"{repo}: the repository has no GGUF file")
    if quant is None:
        if len(cands) == 1:
            return cands[0]
        picked = _with_quant(cands, DEFAULT_QUANT)
        if len(picked) == 1:
            return picked[0]
        raise ReameError(f"{repo} has {len(cands)} GGUF files, choose one with {repo}:QUANT: "
                         + ", ".join(cands))
    picked = _with_quant(cands, quant)
    if len(picked) == 1:
        return picked[0]
    if not picked:
        raise ReameError(f"{repo}: no GGUF file with quant {quant} (files: {', '.join(cands)})")
    raise ReameError(f"{repo}: several GGUF files match {quant}: {', '.join(picked)} "
                     "(name one with hf://REPO/FILE.gguf)")


def _with_quant(files: list[str], quant: str) -> list[str]:
    pat = re.compile(rf"(?<![A-Za-z0-9]){re.escape(quant)}(?![A-Za-z0-9_])", re.IGNORECASE)
    return [f for f in files if pat.search(f)]


# -- huggingface_hub -----------------------------------------------------------------------------

def _import_hub():
    try:
        import huggingface_hub
    except ImportError:
        raise ReameError(f"loading a model by name needs huggingface_hub: {INSTALL_HINT}") from None
    return huggingface_hub


def _settings() -> dict:
    """HF_ENDPOINT / HF_HUB_CACHE / HF_HOME / HF_TOKEN as they are now (huggingface_hub reads
    them when it is imported; reading them here makes every call see the current environment)."""
    env = os.environ
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if not cache and env.get("HF_HOME"):
        cache = os.path.join(os.path.expanduser(env["HF_HOME"]), "hub")
    offline = env.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    return {"endpoint": (env.get("HF_ENDPOINT") or "").rstrip("/") or None,
            "cache_dir": os.path.expanduser(cache) if cache else None,
            "token": env.get("HF_TOKEN") or None, "offline": offline}


def _list_gguf(hub, repo: str, revision: str | None, s: dict) -> list[str]:
    """The repo's file names, from the Hub, or from the local cache when it cannot be reached."""
    if not s["offline"]:
        try:
            return _list_files(hub, repo, revision, s)
        except Exception as e:
            if not _is_connection_error(e):
                raise
            cached = _cached_files(hub, repo, revision, s)
            if cached is None:
                raise
            return cached
    cached = _cached_files(hub, repo, revision, s)
    if cached is None:
        raise ReameError(f"{repo}: not in the local cache and HF_HUB_OFFLINE is set")
    return cached


def _list_files(hub, repo: str, revision: str | None, s: dict) -> list[str]:
    """The repo's files from the Hub's tree API (what HfApi.list_repo_files asks), in one try:
    HfApi retries an unreachable Hub for ~25 s, when the cache could answer at once."""
    from urllib.parse import quote

    from huggingface_hub import constants, get_session
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status
    endpoint = s["endpoint"] or constants.ENDPOINT
    url = (f"{endpoint}/api/models/{repo}/tree/{quote(revision or 'main', safe='')}"
           "?recursive=true&expand=false")
    headers = build_hf_headers(token=s["token"])
    files: list[str] = []
    while url:
        r = get_session().get(url, headers=headers, timeout=constants.HF_HUB_ETAG_TIMEOUT)
        hf_raise_for_status(r)
        files += [e["path"] for e in r.json() if e.get("type") == "file"]
        url = r.links.get("next", {}).get("url")
    return files


def _cached_files(hub, repo: str, revision: str | None, s: dict) -> list[str] | None:
    """File names of the cached snapshot of repo@revision (None: nothing cached)."""
    from huggingface_hub import constants
    cache = s["cache_dir"] or constants.HF_HUB_CACHE
    root = os.path.join(cache, "models--" + repo.replace("/", "--"))
    rev = revision or "main"
    ref = os.path.join(root, "refs", rev)
    if os.path.isfile(ref):
        with open(ref) as f:
            rev = f.read().strip()
    snap = os.path.join(root, "snapshots", rev)
    if not os.path.isdir(snap):
        return None
    out = []
    for dirpath, _, names in os.walk(snap):
        for n in names:
            out.append(os.path.relpath(os.path.join(dirpath, n), snap).replace(os.sep, "/"))
    return out


def _download(hub, repo: str, filename: str, revision: str | None, s: dict) -> str:
    """hf_hub_download of one file (its progress through reame.progress)."""
    import inspect

    from . import progress
    _check_reachable(hub, repo, filename, revision, s)
    extra = {}
    hf_bars_off = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "").lower() in ("1", "true", "yes")
    if not hf_bars_off and "tqdm_class" in inspect.signature(hub.hf_hub_download).parameters:
        extra["tqdm_class"] = progress.tqdm_class(f"downloading {filename}")
    return hub.hf_hub_download(repo_id=repo, filename=filename, revision=revision,
                               cache_dir=s["cache_dir"], token=s["token"], endpoint=s["endpoint"],
                               local_files_only=s["offline"], **extra)


def _check_reachable(hub, repo: str, filename: str, revision: str | None, s: dict) -> None:
    """One request to the Hub, when the file is not in the cache: hf_hub_download retries an
    unreachable Hub five times over ~24 s before it reports a file it does not have. A connection
    error raises (one line, from _explain); any answer, even an error, lets hf_hub_download go on
    and report it."""
    if s["offline"] or isinstance(hub.try_to_load_from_cache(
            repo, filename, cache_dir=s["cache_dir"], revision=revision), str):
        return
    from huggingface_hub import constants, get_session
    from huggingface_hub.utils import build_hf_headers
    url = hub.hf_hub_url(repo, filename, revision=revision, endpoint=s["endpoint"])
    get_session().head(url, headers=build_hf_headers(token=s["token"]),
                       timeout=constants.HF_HUB_ETAG_TIMEOUT)


def _is_connection_error(e: BaseException) -> bool:
    names = {c.__name__ for c in type(e).__mro__}
    return bool(names & {"ConnectError", "ConnectTimeout", "ConnectionError", "TimeoutException",
                         "OfflineModeIsEnabled", "LocalEntryNotFoundError"})


def _explain(e: BaseException, arg: str, s: dict) -> str:
    """One line for a huggingface_hub / network error."""
    endpoint = s["endpoint"] or DEFAULT_ENDPOINT
    kind = {c.__name__ for c in type(e).__mro__}
    if "GatedRepoError" in kind:
        return f"{arg}: the repository is gated: accept its terms on {endpoint} and set HF_TOKEN"
    if "RepositoryNotFoundError" in kind:
        return (f"{arg}: no such file, and no such model repository on {endpoint} "
                "(a private one needs HF_TOKEN)")
    if "RevisionNotFoundError" in kind:
        return f"{arg}: no such revision on {endpoint}"
    if "EntryNotFoundError" in kind and "LocalEntryNotFoundError" not in kind:
        return f"{arg}: no such file in the repository"
    if _is_connection_error(e):
        if s["offline"]:
            return f"{arg}: not in the local cache and HF_HUB_OFFLINE is set"
        return f"{arg}: cannot reach {endpoint} and the file is not in the local cache"
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return f"{arg}: download failed: {first}"

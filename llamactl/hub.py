"""Fetch GGUF files from the Hugging Face hub (or a mirror) into the models directory.

`REPO[:FILE|:QUANT]` names what to fetch, as llama-server's `-hf` does: a file path in the
repo, or a quantization (`Q4_K_M`) picked from the repo's GGUF files, or nothing (the repo's
only GGUF, else its Q4_K_M, else a list to choose from). Files are fetched over plain HTTPS
with resume (a `.part` file beside the target, continued with a Range request), checked
against the size and SHA-256 the hub lists for them, and moved into place only when whole.
Files land in `<models_dir>/<owner>/<repo>/<file>`, so `--model owner/repo/file` and
`llamactl models` find them. A ref or a listed file path that would land anywhere else (`..`,
an absolute path, a backslash, an empty part, a NUL) is refused before anything is written:
the listing comes from whatever `HF_ENDPOINT` names, and a mirror is not trusted with paths.

The endpoint is `HF_ENDPOINT` (default https://huggingface.co) and `HF_TOKEN` is sent when
set: a mirror or a local server works the same way.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import httpx

from llamactl.core.errors import DownloadError

__all__ = [
    "HubFile",
    "ModelRef",
    "check_relative",
    "ensure",
    "fetch_url",
    "hub_endpoint",
    "list_gguf_files",
    "parse_ref",
    "pull",
    "url_target",
]

DEFAULT_ENDPOINT = "https://huggingface.co"
PREFERRED_QUANT = "Q4_K_M"  # llama-server's default pick when a repo holds several
_CHUNK = 1 << 20
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)

Progress = Callable[[str, int, int], None]  # (file, bytes done, bytes total)


@dataclass(frozen=True)
class ModelRef:
    repo: str  # owner/name
    file: str | None = None  # a path in the repo
    quant: str | None = None  # Q4_K_M, q8_0, ...
    revision: str = "main"

    def __post_init__(self) -> None:
        # checked here, not only in parse_ref: the repo and the file become local paths
        check_relative(self.repo, "the repo")
        if self.repo.count("/") != 1:
            raise DownloadError(f"the repo {self.repo!r} is not OWNER/REPO")
        if self.file is not None:
            check_relative(self.file, "the file")


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int | None
    sha256: str | None  # the LFS object id, when the hub lists one


def check_relative(path: str, what: str) -> str:
    """`path` when it is a plain relative path (`/`-separated parts, none empty, `.` or `..`,
    no backslash, NUL or drive letter), else DownloadError: joined to a directory, it stays
    inside it. Names and listings come from the hub or a mirror, which may be hostile."""
    problem = None
    if not path:
        problem = "an empty path"
    elif "\0" in path:
        problem = "a NUL byte"
    elif "\\" in path:
        problem = "a backslash"
    elif path.startswith("/"):
        problem = "an absolute path"
    elif re.match(r"[A-Za-z]:", path):
        problem = "a drive letter"
    else:
        bad = next((part for part in path.split("/") if part in ("", ".", "..")), None)
        if bad is not None:
            problem = "an empty part" if bad == "" else f"a {bad!r} part"
    if problem is not None:
        raise DownloadError(
            f"{what} {path!r} is refused: {problem} would leave the models directory; "
            "nothing was written"
        )
    return path


def parse_ref(text: str, revision: str = "main") -> ModelRef:
    """`owner/repo`, `owner/repo:Q4_K_M` or `owner/repo:path/file.gguf`."""
    repo, _, tail = text.strip().partition(":")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
        raise DownloadError(
            f"{text!r} is not a hub model: expected OWNER/REPO[:FILE|:QUANT], "
            "e.g. bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M"
        )
    if not tail:
        return ModelRef(repo, revision=revision)
    if tail.lower().endswith(".gguf"):
        return ModelRef(repo, file=tail, revision=revision)
    return ModelRef(repo, quant=tail, revision=revision)


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def _client(timeout: float = 30.0) -> httpx.Client:
    headers = {"User-Agent": "llamactl"}
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(headers=headers, timeout=timeout, follow_redirects=True)


def _get(client: httpx.Client, url: str, what: str) -> httpx.Response:
    try:
        response = client.get(url)
    except httpx.HTTPError as exc:
        raise DownloadError(
            f"cannot reach the hub at {hub_endpoint()} ({exc}); are you offline? "
            "(HF_ENDPOINT points at a mirror)"
        ) from None
    if response.status_code in (401, 403):
        raise DownloadError(f"{what}: access denied (a gated or private repo needs HF_TOKEN)")
    if response.status_code == 404:
        raise DownloadError(f"{what}: not found on {hub_endpoint()}")
    if response.status_code >= 400:
        raise DownloadError(f"{what}: the hub answered HTTP {response.status_code}")
    return response


def list_gguf_files(ref: ModelRef, client: httpx.Client | None = None) -> list[HubFile]:
    """The repo's GGUF files with their sizes and hashes (the hub's tree listing)."""
    own = client is None
    client = client or _client()
    try:
        url = (
            f"{hub_endpoint()}/api/models/{ref.repo}/tree/{quote(ref.revision, safe='')}"
            "?recursive=true"
        )
        entries = _get(client, url, f"repo {ref.repo}").json()
    finally:
        if own:
            client.close()
    files = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("type") != "file":
            continue
        path = entry.get("path", "")
        if not isinstance(path, str):
            continue
        if not path.lower().endswith(".gguf"):
            continue
        # any listed GGUF path that would leave the repo's folder condemns the whole listing
        check_relative(path, f"{hub_endpoint()} lists in {ref.repo} the file")
        lfs = entry.get("lfs")
        lfs = lfs if isinstance(lfs, dict) else {}
        size = lfs.get("size", entry.get("size"))
        if size is not None and (not isinstance(size, int) or size < 0):
            raise DownloadError(f"{ref.repo} lists {path} with the size {size!r}: not a size")
        oid = lfs.get("oid")
        files.append(HubFile(path, size, oid if isinstance(oid, str) else None))
    return files


def choose(ref: ModelRef, files: list[HubFile]) -> list[HubFile]:
    """The file(s) `ref` names: one file, or every shard of a split model."""
    models = [f for f in files if "mmproj" not in Path(f.path).name.lower()]
    if ref.file is not None:
        picked = [f for f in files if f.path == ref.file]
        if not picked:
            raise DownloadError(f"{ref.repo} has no file {ref.file}; it has: {_names(files)}")
        return _with_shards(picked[0], files)
    if not models:
        raise DownloadError(f"{ref.repo} holds no GGUF model file")
    quant = (ref.quant or "").upper()
    if quant:
        picked = [f for f in models if _quant_of(f.path) == quant]
    elif len({_base(f.path) for f in models}) == 1:
        picked = models
    else:
        picked = [f for f in models if _quant_of(f.path) == PREFERRED_QUANT]
    bases = sorted({_base(f.path) for f in picked})
    if len(bases) != 1:
        wanted = f"quantization {quant}" if quant else f"a default ({PREFERRED_QUANT})"
        have = ", ".join(sorted({q for f in models if (q := _quant_of(f.path))})) or "none"
        raise DownloadError(
            f"{ref.repo}: {'several files match' if bases else 'no file matches'} {wanted}; "
            f"quantizations there: {have}; name one as {ref.repo}:QUANT or a file as "
            f"{ref.repo}:FILE.gguf"
        )
    first = min((f for f in picked if _base(f.path) == bases[0]), key=lambda f: f.path)
    return _with_shards(first, files)


def _with_shards(first: HubFile, files: list[HubFile]) -> list[HubFile]:
    if not _SHARD.search(first.path):
        return [first]
    base = _base(first.path)
    return sorted((f for f in files if _base(f.path) == base), key=lambda f: f.path)


def _base(path: str) -> str:
    return _SHARD.sub("", path).removesuffix(".gguf").removesuffix(".GGUF")


def _quant_of(path: str) -> str | None:
    """The quantization a file name carries (…-Q4_K_M.gguf, …q8_0.gguf, …-F16.gguf)."""
    name = _base(Path(path).name).upper()
    m = re.search(r"(?:^|[-._])((?:IQ|Q)\d+(?:_[A-Z0-9]+)*|F16|BF16|F32)$", name)
    return m.group(1) if m else None


def _names(files: list[HubFile]) -> str:
    return ", ".join(f.path for f in files) or "no GGUF files"


def target_path(models_dir: Path, ref: ModelRef, file: HubFile) -> Path:
    """Where `file` is saved: under `models_dir/OWNER/REPO`, checked once more on the joined
    path (lexically, so a folder the user linked into the models directory still works)."""
    check_relative(file.path, f"{ref.repo} lists the file")
    root = os.path.abspath(models_dir / ref.repo)
    target = os.path.abspath(models_dir / ref.repo / file.path)
    if os.path.commonpath([root, target]) != root or target == root:
        raise DownloadError(f"{file.path!r} would be saved outside {root}; nothing was written")
    return models_dir / ref.repo / file.path


def pull(
    ref: ModelRef,
    models_dir: Path,
    *,
    progress: Progress | None = None,
    client: httpx.Client | None = None,
) -> list[Path]:
    """Fetch what `ref` names into `models_dir` (files already there and whole are kept);
    return the local paths, the first shard first."""
    own = client is None
    client = client or _client()
    try:
        files = choose(ref, list_gguf_files(ref, client))
        return [_fetch(client, ref, f, target_path(models_dir, ref, f), progress) for f in files]
    finally:
        if own:
            client.close()


def ensure(ref: ModelRef, models_dir: Path, *, progress: Progress | None = None) -> list[Path]:
    """What `ref` names, from the models dir when a pull has put it there (no network, so
    `-hf` works offline once fetched), else pulled now."""
    repo_dir = models_dir / ref.repo
    if repo_dir.is_dir():
        local = [
            HubFile(p.relative_to(repo_dir).as_posix(), None, None)
            for p in sorted(repo_dir.rglob("*.gguf"))
        ]
        try:
            return [repo_dir / f.path for f in choose(ref, local)]
        except DownloadError:
            pass  # not there (or not unambiguously): ask the hub
    return pull(ref, models_dir, progress=progress)


def _fetch(
    client: httpx.Client, ref: ModelRef, file: HubFile, target: Path, progress: Progress | None
) -> Path:
    if target.is_file() and (file.size is None or target.stat().st_size == file.size):
        if progress is not None:
            progress(file.path, target.stat().st_size, target.stat().st_size)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    if file.size is not None and have > file.size:
        part.unlink()
        have = 0
    url = f"{hub_endpoint()}/{ref.repo}/resolve/{quote(ref.revision, safe='')}/{quote(file.path)}"
    _download(client, url, part, file, have, progress, source="the hub")
    _verify(part, file)
    os.replace(part, target)
    return target


def _download(
    client: httpx.Client,
    url: str,
    part: Path,
    file: HubFile,
    have: int,
    progress: Progress | None,
    *,
    source: str,
) -> None:
    """`url` appended to `part` from byte `have` on (a Range request; from 0 when the server
    offers no resume), reporting as `file.path`."""
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        with client.stream("GET", url, headers=headers, timeout=60.0) as response:
            if response.status_code == 416 and file.size == have:
                pass  # the part file is already whole
            elif response.status_code >= 400:
                raise DownloadError(f"{file.path}: {source} answered HTTP {response.status_code}")
            else:
                if have and response.status_code != 206:
                    have = 0  # no resume offered: start again
                total = file.size or (have + int(response.headers.get("content-length", 0)))
                with open(part, "ab" if have else "wb") as out:
                    done = have
                    for chunk in response.iter_bytes():  # as it arrives: kept on a cut
                        out.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(file.path, done, total)
    except httpx.HTTPError as exc:
        raise DownloadError(
            f"{file.path}: the download broke off ({exc}); run the same command again to resume"
        ) from None


def url_target(url: str, models_dir: Path) -> Path:
    """Where `--model-url URL` keeps its file: `<models_dir>/<host>/<file name>`, the name
    being the URL path's last part (checked like a hub path: it stays in the folder)."""
    parsed = urlsplit(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise DownloadError(f"{url!r} is not an http(s) URL; nothing was downloaded")
    name = unquote(parsed.path.rsplit("/", 1)[-1])
    if not name:
        raise DownloadError(f"{url!r} names no file (its path ends with '/')")
    host = parsed.hostname + (f"_{parsed.port}" if parsed.port else "")
    return models_dir / check_relative(f"{host}/{name}", "the URL's file name")


def fetch_url(url: str, models_dir: Path, *, progress: Progress | None = None) -> Path:
    """The file at `url` in the models dir: kept from an earlier start when it is there (no
    network), else downloaded with resume and moved into place only when whole. No hub token
    is sent: the URL may be anyone's."""
    target = url_target(url, models_dir)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    client = httpx.Client(headers={"User-Agent": "llamactl"}, timeout=30.0, follow_redirects=True)
    with client:
        _download(
            client,
            url.strip(),
            part,
            HubFile(target.name, None, None),
            have,
            progress,
            source=urlsplit(url).hostname or "the server",
        )
    with open(part, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        part.unlink()
        raise DownloadError(f"{url} is not a GGUF file (it starts {magic!r}); nothing was kept")
    os.replace(part, target)
    return target


def _verify(part: Path, file: HubFile) -> None:
    size = part.stat().st_size
    if file.size is not None and size != file.size:
        raise DownloadError(
            f"{file.path}: {size} bytes arrived, the hub lists {file.size}; "
            "run the same command again to resume"
        )
    if file.sha256:
        digest = hashlib.sha256()
        with open(part, "rb") as f:
            while block := f.read(_CHUNK):
                digest.update(block)
        if digest.hexdigest() != file.sha256:
            part.unlink()
            raise DownloadError(
                f"{file.path}: the SHA-256 of the download does not match the hub's "
                "(the partial file was removed; try again)"
            )

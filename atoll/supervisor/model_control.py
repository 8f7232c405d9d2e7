"""Triton's model control: which models of the repository a server serves, and their states.

Modes as Triton's (`none`, `explicit`, `poll`); a model is named by its folder directly inside the
repository, any other name refused before anything is read. The supervisor does the work
(`Supervisor.add_model` / `remove_model`), one load or unload at a time; a load that fails part way
takes back what it did, and a model that does not load is contained (one log line, UNAVAILABLE with
its reason in the index, the others served; `server.exit_on_error` decides a start). A load may
carry Triton's parameters (`load_request.py`). What each mode and parameter does: docs/serving.md
("Model control") and docs/models.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from pathlib import Path

from atoll.kserve.errors import ApiError, ErrorCode
from atoll.repository.specs import ModelSpec, RepositoryError, is_model_folder, load_versions
from atoll.supervisor import load_request
from atoll.wire.model_control import IndexModels, LoadModel, UnloadModel

log = logging.getLogger(__name__)
MODES = ("none", "explicit", "poll")
NAME_MAX = 255  # bytes in a model name, as in a file name


class ModelsFailed(RuntimeError):
    """Models of the start did not load and `server.exit_on_error` is set (Triton: exit status 1)."""


def one_line(exc: BaseException) -> str:
    """An error's message on one line (onnxruntime's and the workers' can span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def check_model_name(name: str) -> None:
    """Refuse (INVALID_ARGUMENT) a name that cannot be a model folder directly inside the repository:
    empty, `.` or `..`, holding a path separator or NUL, not UTF-8, or longer than a file name."""
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        size = None
    if size is None:
        reason = "is not valid UTF-8"
    elif name in ("", ".", ".."):
        reason = "is empty" if not name else "is not a folder name"
    elif any(c in name for c in "/\\\0"):
        reason = "holds a path separator or NUL: a model is a folder directly inside the repository"
    elif size > NAME_MAX:
        reason = f"is {size} bytes long; at most {NAME_MAX}"
    else:
        return
    raise ApiError(ErrorCode.INVALID_ARG, f"model name {name[:80]!r} {reason}")


def model_folders(repository: Path) -> list[str]:
    return sorted(d.name for d in repository.iterdir() if is_model_folder(d))


def _signature(folder: Path) -> tuple:
    """What changes when a model's files do (poll mode)."""
    return tuple(sorted((p.relative_to(folder).as_posix(), p.stat().st_mtime_ns, p.stat().st_size)
                        for p in folder.rglob("*") if p.is_file()))  # fmt: skip


def _read(folder: Path, config: dict | None) -> tuple[list[ModelSpec], dict[str, tuple]]:
    """The served versions of `folder` and, per version, the signature of its files and of those
    every version shares (config.pbtxt, labels), all of the same files: a folder written while it
    was read (poll mode) is read again at the next scan."""
    before = _signature(folder)
    specs = load_versions(folder, config)
    if _signature(folder) != before:
        raise OSError(f"{folder.name}: its files changed while they were read")
    top = [(f[0].split("/", 1)[0], f) for f in before]
    shared = tuple(f for first, f in top if not first.isdigit())
    return specs, {s.version: (shared, tuple(f for first, f in top if first == s.version)) for s in specs}


class ModelControl:
    def __init__(self, repository: Path, mode: str, poll_s: float, add, remove, check=None):
        """`add(spec)` and `remove(key)`: the supervisor's coroutines serving and dropping one version
        of a model (`ModelSpec.key`); `check(spec)` raises (ValueError) for a spec that must not
        replace what is served (e.g. the real-time admission test, rt_admission.py), before anything
        is dropped."""
        if mode not in MODES:
            raise ValueError(f"model control mode must be one of {', '.join(MODES)}; got {mode!r}")
        self.repository = repository
        self.mode = mode
        self.poll_s = poll_s
        self._add, self._remove, self._check = add, remove, check
        self._lock = asyncio.Lock()
        self._states: dict[str, dict] = {}  # model -> its index entry while no version has one
        self._versions: dict[str, dict[str, dict]] = {}  # model -> version -> its index entry
        self._served: dict[str, dict[str, tuple[ModelSpec, tuple]]] = {}  # model -> version -> (spec, signature)
        self._uploads: dict[str, Path] = {}  # model -> the folder its load request's files were written to

    def close(self) -> None:
        """Remove the folders of models loaded from files sent in load requests."""
        for upload in self._uploads.values():
            shutil.rmtree(upload, ignore_errors=True)
        self._uploads.clear()

    async def start(self, names: list[str], exit_on_error: bool = True) -> list[str]:
        """Serve the models of the start: `names` in explicit mode (`*` for all), else every one.
        Each is tried; returns those that failed, or raises `ModelsFailed` naming them when
        `exit_on_error`. A name that cannot be a model folder is refused first (ApiError)."""
        every = await asyncio.to_thread(model_folders, self.repository)
        if self.mode == "explicit" and names != ["*"]:
            for name in names:
                check_model_name(name)
            every = names
        failed = []
        for name in every:
            try:
                await self._load(name)
            except ApiError:  # logged by _load, its reason in the index
                failed.append(name)
        if failed and exit_on_error:
            raise ModelsFailed(f"failed to load {', '.join(failed)} (--exit-on-error=false serves the others)")
        return failed

    async def handle(self, action):
        match action:
            case LoadModel(name=name, parameters=parameters):
                self._check_mode()
                check_model_name(name)
                return await self._load(name, parameters)
            case UnloadModel(name=name):
                self._check_mode()
                check_model_name(name)
                return await self._unload(name)
            case IndexModels(ready=ready):
                return await self.index(ready)
        raise ValueError(f"unknown model-control action {action!r}")

    async def index(self, ready: bool = False) -> list[dict]:
        """Triton's repository index: every model of the repository; once it was loaded or asked
        for, an entry per version with its state (READY, LOADING, UNLOADING, UNAVAILABLE with a
        reason), or one without a version where its load failed before any was read."""
        out = []
        for name in sorted({*await asyncio.to_thread(model_folders, self.repository), *self._states,
                            *self._versions}):  # fmt: skip
            versions = self._versions.get(name, {})
            entries = [{"name": name, "version": v, **versions[v]} for v in sorted(versions, key=int)]
            for entry in entries or [{"name": name, **self._states.get(name, {})}]:
                if not ready or entry.get("state") == "READY":
                    out.append(entry)
        return out

    def _state(self, name: str, version: str, state: str, reason: str = "") -> None:
        self._versions.setdefault(name, {})[version] = {"state": state} | ({"reason": reason} if reason else {})

    def _unavailable(self, name: str, reason: str) -> None:
        """A load of `name` failed before it read any version, and none is served."""
        versions = self._versions.get(name)
        if not versions:
            self._states[name] = {"state": "UNAVAILABLE", "reason": reason}
        for version in versions or ():
            self._state(name, version, "UNAVAILABLE", reason)

    async def poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                present = set(await asyncio.to_thread(model_folders, self.repository))
            except OSError as exc:
                log.warning("cannot scan the repository: %s", exc)
                continue
            for name in sorted(set(self._served) - present):
                await self._unload(name)
            for name in sorted(present):
                with contextlib.suppress(ApiError):  # logged and reported in the index; the others go on
                    await self._load(name)

    def _check_mode(self) -> None:
        if self.mode != "explicit":
            raise ApiError(ErrorCode.UNAVAILABLE, "explicit model load / unload is not allowed in "
                                                  f"model control mode {self.mode!r}")  # fmt: skip

    async def _load(self, name: str, parameters: dict | None = None) -> None:
        """Serve the model of folder `name` (a name `check_model_name` passed), or of the files and
        config of a load request's `parameters` (`load_request.py`). Whatever fails before `add`
        leaves every served model as it was; `add` takes back what it did when it fails."""
        async with self._lock:
            try:
                request = load_request.parse(parameters or {})
            except load_request.LoadParameterError as exc:
                raise self._failed(name, exc) from None
            upload = None
            if request.files:  # the model's folder is the request's files alone
                upload = Path(tempfile.mkdtemp(prefix="atoll-load-"))
                folder = upload / name
                try:
                    await asyncio.to_thread(load_request.write_files, request.files, folder)
                except OSError as exc:  # e.g. a file name longer than the file system takes
                    shutil.rmtree(upload, ignore_errors=True)
                    log.error("failed to load '%s': its files cannot be written: %s", name, exc)
                    # Triton's status and words; the file system's reason, not the server's paths
                    raise ApiError(ErrorCode.INTERNAL, f"failed to load '{name}': failed to poll from model "
                                                       f"repository ({exc.strerror})") from None  # fmt: skip
            else:
                folder = self.repository / name
                try:
                    present = is_model_folder(folder)
                except OSError:  # e.g. a path too long for the file system
                    present = False
                if not present:  # Triton's status for an unknown model: INTERNAL (tests/atoll/triton_calls.py)
                    log.error("failed to load '%s': no such model in the repository", name)
                    raise ApiError(ErrorCode.INTERNAL, f"failed to load '{name}': no model named '{name}' in the "
                                                       "repository (a folder with a config.pbtxt or a "
                                                       "<version>/model.onnx)")  # fmt: skip
            try:
                await self._serve(name, folder, request, upload)
            except BaseException:
                if upload is not None:
                    shutil.rmtree(upload, ignore_errors=True)
                raise
            if upload is not None:
                if (old := self._uploads.pop(name, None)) is not None:
                    shutil.rmtree(old, ignore_errors=True)
                self._uploads[name] = upload

    async def _serve(self, name: str, folder: Path, request: load_request.LoadRequest, upload: Path | None) -> None:
        """Serve the versions of `name` its version_policy names: a new or changed version is
        loaded (a changed one dropped first), then versions no longer named are dropped (as Triton
        does when the policy or the files change), the others serving throughout. Where a version
        fails, the others are still tried and nothing is dropped. `upload`: the server's folder
        holding a load request's files, which no answer names."""

        def reason(exc: BaseException) -> str:
            return one_line(exc) if upload is None else one_line(exc).replace(f"{upload}/", "")

        try:
            specs, signatures = await asyncio.to_thread(_read, folder, request.config)
        except (RepositoryError, OSError) as exc:  # OSError: its files changed while read
            if not self._served.get(name):  # else its served versions go on
                self._unavailable(name, reason(exc))
            raise self._failed(name, reason(exc)) from None
        self._states.pop(name, None)
        failures = []
        for spec in specs:
            signature = (signatures[spec.version], request.key())  # files sent in a request are new files
            old = self._served.get(name, {}).get(spec.version)
            if old is not None and old[1] == signature:
                continue
            if self._check is not None:
                try:
                    self._check(spec)
                except ValueError as exc:  # refused: what is served goes on as it was
                    if old is None:
                        self._state(name, spec.version, "UNAVAILABLE", reason(exc))
                    failures.append(reason(exc))
                    continue
            if old is not None:
                await self._drop(name, spec.version)
            self._state(name, spec.version, "LOADING")
            try:
                await self._add(spec)
            except Exception as exc:  # the worker's or executor's reason; the supervisor took back the load
                self._state(name, spec.version, "UNAVAILABLE", reason(exc))
                failures.append(reason(exc))
                continue
            self._served.setdefault(name, {})[spec.version] = (spec, signature)
            self._state(name, spec.version, "READY")
            log.info("model %s version %s is ready", name, spec.version)
        if failures:
            raise self._failed(name, failures[0])
        for version in sorted(set(self._served.get(name, ())) - {s.version for s in specs}, key=int):
            await self._drop(name, version)

    @staticmethod
    def _failed(name: str, reason: BaseException | str) -> ApiError:
        """Triton's wording for a load that failed, logged as one line."""
        message = f"failed to load '{name}': {reason if isinstance(reason, str) else one_line(reason)}"
        log.error("%s", message)
        return ApiError(ErrorCode.INVALID_ARG, message)

    async def _unload(self, name: str) -> None:
        async with self._lock:
            for version in sorted(self._served.get(name, ()), key=int):
                await self._drop(name, version)

    async def _drop(self, name: str, version: str) -> None:
        self._state(name, version, "UNLOADING")
        await self._remove(self._served[name][version][0].key)
        del self._served[name][version]
        if not self._served[name]:
            del self._served[name]
            if name in self._uploads:
                shutil.rmtree(self._uploads.pop(name), ignore_errors=True)
        self._state(name, version, "UNAVAILABLE", "unloaded")
        log.info("model %s version %s is unloaded", name, version)

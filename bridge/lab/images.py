"""Container images built on this host from Debian's own packages, run with podman: no
registry is needed, only the Debian mirror apt already uses.

A server *flavor* names a MariaDB or MySQL version, the Debian release that ships it
and its packages (``FLAVORS``). Its image is built once and kept: a base image made
with ``mmdebstrap`` from this host's apt sources (the suites renamed to the release, so
no mirror name is written anywhere), imported with ``podman import``, then the server's
packages installed on it from a Containerfile (``SERVER_CONTAINERFILE``). MySQL 9.7
comes from ``sid``, which has no -updates or -security suites and whose Release file may
be past its Valid-Until date on a mirror: apt is told not to check that there. ``Podman`` holds the options this
host needs (the OCI runtime and cgroup manager a cgroup v1 or hybrid host needs, ulimits
under the host's hard limits). The sandbox runs a flavor's servers in these images
(bridge.lab.sandbox, ``sandbox up --flavor``).
"""

from __future__ import annotations

import json
import logging
import re
import resource
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bridge.errors import SandboxError
from bridge.server.flavor import MARIADB, MYSQL

log = logging.getLogger(__name__)
LOCAL = "local"  # the host's own mariadbd, no container


@dataclass(frozen=True, slots=True)
class ImageFlavor:
    release: str  # the Debian release shipping it
    packages: str  # what its image installs
    server: str  # mariadb | mysql (bridge.server.flavor): how bridge.lab.runners runs it


_MARIADB = "mariadb-server mariadb-client"
FLAVORS = {"mariadb-10.11": ImageFlavor("bookworm", _MARIADB, MARIADB),
           "mariadb-11.8": ImageFlavor("trixie", _MARIADB, MARIADB),
           "mysql-9.7": ImageFlavor("sid", "mysql-server mysql-client", MYSQL)}
UNRELEASED = ("sid",)  # only the suite itself; its Release file's Valid-Until is not checked
NO_VALID_UNTIL = 'Acquire::Check-Valid-Until "false"'
APT_SOURCES = (Path("/etc/apt/sources.list.d"), Path("/etc/apt/sources.list"))
SERVER_CONTAINERFILE = """ARG BASE
FROM ${BASE}
ARG PACKAGES
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${PACKAGES} \\
 && rm -rf /var/lib/apt/lists/*
"""
PACKAGES = "podman mmdebstrap runc iptables uidmap"  # what `make` installs for the container flavors
BUILD_TIMEOUT_S = 900


def base_image(release: str) -> str:
    return f"localhost/rdma-bridge-base:{release}"


def server_image(flavor: str) -> str:
    return f"localhost/rdma-bridge-{flavor}:latest"


def check_flavor(flavor: str) -> str:
    if flavor != LOCAL and flavor not in FLAVORS:
        raise SandboxError(f"server flavor {flavor!r}: unknown; choose {LOCAL} (this host's mariadbd) or "
                           f"{', '.join(FLAVORS)} (a container built here from Debian's packages)")
    return flavor


def server_kind(flavor: str) -> str:
    """mariadb or mysql: the server a flavor runs (this host's own is MariaDB)."""
    return MARIADB if flavor == LOCAL else FLAVORS[check_flavor(flavor)].server


@dataclass(frozen=True, slots=True)
class Podman:
    """podman with the options this host needs, found once."""

    binary: str
    global_args: tuple[str, ...]
    run_args: tuple[str, ...]

    @classmethod
    def here(cls) -> Podman:
        binary = shutil.which("podman")
        if binary is None:
            raise SandboxError(f"podman not found: the container flavors need it; `apt-get install {PACKAGES}` "
                               "(`make test-matrix` does)")
        hybrid = not Path("/sys/fs/cgroup/cgroup.controllers").exists()  # cgroup v1 or hybrid: crun fails there
        global_args = ("--runtime", "runc", "--cgroup-manager", "cgroupfs") if hybrid else ()
        return cls(binary, global_args, _ulimits())

    def __call__(self, *args: str, check: bool = True, timeout: float | None = 120,
                 **kw) -> subprocess.CompletedProcess:
        done = subprocess.run([self.binary, *self.global_args, *args], capture_output=True, timeout=timeout, **kw)
        if check and done.returncode != 0:
            raise SandboxError(f"podman {args[0]}: {_tail(done.stderr)}")
        return done

    def containers_conf(self) -> str:
        """A containers.conf (CONTAINERS_CONF) with this host's runtime, cgroup manager and
        container ulimits, for podman commands that take no options for them (its Docker
        API for docker-compose, kube play)."""
        ulimits = [a for a in self.run_args if a != "--ulimit"]
        engine = dict(zip(self.global_args[::2], self.global_args[1::2]))
        return ("[containers]\ndefault_ulimits = [" + ", ".join(json.dumps(u) for u in ulimits) + "]\n"
                "[engine]\n" + "".join(f'{key.removeprefix("--").replace("-", "_")} = {json.dumps(value)}\n'
                                        for key, value in engine.items()))

    def has_image(self, name: str) -> bool:
        return self("image", "exists", name, check=False).returncode == 0


CONTAINER_LIMIT = 16384  # nofile and nproc in a container: podman's defaults are above some hosts' hard limits


def _ulimits() -> tuple[str, ...]:
    """Container ulimits runc can set here: podman's defaults are refused where they pass
    the host's hard limits (seen: nproc 65536 refused under a hard limit of 96363)."""
    args = []
    for name, which in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        hard = resource.getrlimit(which)[1]
        limit = CONTAINER_LIMIT if hard == resource.RLIM_INFINITY else min(hard, CONTAINER_LIMIT)
        args += ["--ulimit", f"{name}={limit}:{limit}"]
    return tuple(args)


def ensure_image(flavor: str, podman: Podman | None = None) -> str:
    """The flavor's server image, built first if this host does not have it."""
    podman = podman or Podman.here()
    name = server_image(flavor)
    if podman.has_image(name):
        return name
    spec = FLAVORS[flavor]
    base = ensure_base(spec.release, podman)
    log.info("building %s: Debian %s's %s on %s", name, spec.release, spec.packages, base)
    with tempfile.TemporaryDirectory(prefix="rdma-bridge-image-") as context:
        (Path(context) / "Containerfile").write_text(SERVER_CONTAINERFILE)
        podman("build", "--network", "host", "--build-arg", f"BASE={base}", "--build-arg",
               f"PACKAGES={spec.packages}", "-t", name, context, timeout=BUILD_TIMEOUT_S)
    return name


def ensure_base(release: str, podman: Podman) -> str:
    """A minimal Debian ``release`` image made with mmdebstrap from this host's mirror."""
    name = base_image(release)
    if podman.has_image(name):
        return name
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise SandboxError(f"mmdebstrap not found: it makes the containers' Debian base; `apt-get install {PACKAGES}`")
    sources = apt_sources(release)
    log.info("building %s with mmdebstrap from this host's apt sources", name)
    with tempfile.TemporaryDirectory(prefix="rdma-bridge-rootfs-") as tmp:
        tar = Path(tmp) / "rootfs.tar"
        options = [f"--aptopt={NO_VALID_UNTIL}"] if release in UNRELEASED else []  # kept in the image
        made = subprocess.run([mmdebstrap, "--variant=minbase", "--format=tar", *options, release, str(tar), "-"],
                              input=sources.encode(), capture_output=True, timeout=BUILD_TIMEOUT_S)
        if made.returncode != 0:
            raise SandboxError(f"mmdebstrap {release}: {_tail(made.stderr)}")
        podman("import", str(tar), name, timeout=BUILD_TIMEOUT_S)
    return name


def apt_sources(release: str, sources: tuple[Path, ...] = APT_SOURCES, codename: str | None = None) -> str:
    """This host's Debian apt sources (deb822 or one-line), the suites renamed from the
    host's release to ``release`` (bookworm-security -> trixie-security and so on); for
    an unreleased suite (sid) only the suite itself, the entries of -updates and
    -security dropped."""
    codename = codename or _host_codename()
    entries = _read_sources(sources)
    if not entries:
        raise SandboxError("apt sources: no Debian mirror in /etc/apt/sources.list(.d); the container images are "
                           "built from Debian's packages")
    renamed = [re.sub(rf"\b{re.escape(codename)}(?=[-\s]|$)", release, e, flags=re.MULTILINE) for e in entries]
    if release in UNRELEASED:
        renamed = [kept for kept in (_only_suite(e, release) for e in renamed) if kept]
    return "\n\n".join(renamed) + "\n"


def _only_suite(entry: str, release: str) -> str:
    """A deb822 stanza or a one-line entry with ``release-*`` suites removed; '' when none is left."""
    if entry.startswith("deb "):
        fields = re.sub(r"\[[^]]*\]", "", entry).split()  # deb URI SUITE COMPONENT...
        return entry if len(fields) > 2 and fields[2] == release else ""
    lines = []
    for line in entry.splitlines():
        if line.startswith("Suites:"):
            suites = [s for s in line.split()[1:] if s == release]
            if not suites:
                return ""
            line = "Suites: " + " ".join(suites)
        lines.append(line)
    return "\n".join(lines)


def _read_sources(sources: tuple[Path, ...]) -> list[str]:
    """The Debian entries: deb822 stanzas of *.sources files, ``deb`` lines of a one-line file."""
    out = []
    for path in sources:
        if path.is_dir():
            for f in sorted(path.glob("*.sources")):
                out += [b.strip() for b in f.read_text().split("\n\n") if re.search(r"^URIs:.*debian", b, re.M)]
        elif path.is_file():
            out += [line.strip() for line in path.read_text().splitlines()
                    if line.startswith("deb ") and "debian" in line]
    return out


def _host_codename() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    raise SandboxError("apt sources: /etc/os-release names no VERSION_CODENAME (not a Debian host?)")


def _tail(stderr: bytes, chars: int = 600) -> str:
    return stderr.decode(errors="replace").strip()[-chars:]

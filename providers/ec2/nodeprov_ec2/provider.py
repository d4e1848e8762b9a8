from __future__ import annotations

import functools
import hashlib
import logging
import os
import time
from collections.abc import Callable
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import anyio
import anyio.to_thread
import asyncssh
import boto3
import botocore.config
import botocore.exceptions
from pydantic import Field

from nodeprov.errors import ConfigError, NodeGoneError, NodeprovError, ProviderError, ProvisionError
from nodeprov.node import (
    LABEL_EXPIRES_AT,
    LABEL_NODE_ID,
    LABEL_PROVISION,
    NodeConfig,
    NodeHandle,
    NodeInfo,
    NodeProvider,
    ProviderSettings,
    Requirement,
    Rollback,
)
from nodeprov_ssh import NODE_MARKER, Link, MachineNode, SshHostKeyError, SshNode, SshNodes, SshNodeSettings

__all__ = [
    "LABEL_HOST_KEY",
    "LABEL_NODE_DIR",
    "LABEL_WORKDIR",
    "Ec2Node",
    "Ec2Provider",
    "Ec2Settings",
    "client_token",
]

logger = logging.getLogger("nodeprov.ec2")
T = TypeVar("T")

LABEL_WORKDIR = "nodeprov.workdir"
"""Tag of an instance: its node's working directory, so a handle needs no SSH to exist."""
LABEL_NODE_DIR = "nodeprov.node-dir"
"""Tag of an instance: its node's directory (the base of HOME and of the node's marker)."""
LABEL_HOST_KEY = "nodeprov.host-key"
"""Tag of an instance: the public SSH host key nodeprov gave it (see :func:`_user_data`)."""
_LIVE = ["pending", "running", "stopping", "stopped"]
_SUSPENDED = {"stopping", "stopped"}


class Ec2Settings(SshNodeSettings):
    """Settings of the EC2 provider: where and what to launch, and how to log in to it over
    SSH (see :class:`~nodeprov_ssh.SshNodeSettings`). Credentials are boto3's: the
    environment, ``profile``, the shared files, an instance role."""

    # Not where (region, endpoint, network, addresses), not what it costs (instance type),
    # not what it boots (image), nor how it is logged in to (keys, host keys).
    caller_settings: ClassVar[frozenset[str]] = frozenset(
        {"ready_timeout", "spawn_timeout", "eof_grace", "term_grace"}
    )

    region: str | None = Field(
        default=None, description="AWS region; default: boto3's (AWS_REGION, the profile)."
    )
    profile: str | None = Field(
        default=None, description="Profile of the shared AWS files; default: boto3's."
    )
    endpoint_url: str | None = Field(
        default=None, description="EC2 endpoint, e.g. a VPC endpoint or a local emulator; default: AWS's."
    )
    image_id: str | None = Field(default=None, description="AMI of every node; needed to provision.")
    instance_type: str = Field(default="t3.micro", description="Instance type.")
    subnet_id: str | None = Field(default=None, description="Subnet; default: the default VPC's.")
    security_group_ids: list[str] = Field(
        default_factory=list,
        description="Security groups; default: one made per node, allowing SSH from ssh_cidr, "
        "deleted with the node.",
    )
    ssh_cidr: str | None = Field(
        default=None,
        description="Addresses allowed to SSH in when nodeprov makes the security group (e.g. "
        "this control plane's address/32); needed then: there is no default open to the world.",
    )
    key_name: str | None = Field(
        default=None,
        description="EC2 key pair to launch with; default: the public key of key_files[0] is "
        "imported per node and deleted with it.",
    )
    address: Literal["public", "private"] = Field(
        default="public", description="Which address of the instance to SSH to."
    )
    connect_to: str | None = Field(
        default=None,
        description="SSH to this host instead of the instance's address (a forwarded port on "
        "127.0.0.1 with 'port', a tunnel); host keys are checked all the same.",
    )
    ready_timeout: float = Field(
        default=600.0, gt=0, description="Seconds an instance may take to run and answer SSH."
    )
    retry_mode: Literal["standard", "adaptive"] = Field(
        default="standard", description="botocore's retry mode for throttled and failed calls."
    )
    max_attempts: int = Field(default=5, ge=1, description="Attempts per EC2 call, retries included.")


def client_token(config: NodeConfig) -> str:
    """EC2's idempotency token of the launch: the same for every attempt of one provision
    (the node id and its provision mark), another for any other; 64 characters at most, as
    EC2 requires, whatever the node id."""
    digest = hashlib.sha256(f"{config.node_id}/{config.provision_mark}".encode()).hexdigest()
    return f"nodeprov-{digest[:54]}"


def _tags(labels: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in labels.items()]


def _labels(instance: dict[str, Any]) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in instance.get("Tags") or ()}


def _user_data(expires: str | None, host_key: asyncssh.SSHKey | None) -> str:
    """cloud-init user data: the instance's SSH host key (ours, so that it is known before
    the first connection), and a power-off at ``expires`` (ISO 8601) checked at every boot;
    with the 'terminate' shutdown behaviour the instance is then deleted."""
    lines = ["#cloud-config"]
    if host_key is not None:
        private = host_key.export_private_key().decode().strip().replace("\n", "\n    ")
        public = host_key.export_public_key().decode().strip()
        lines += [
            "ssh_deletekeys: true",
            "ssh_genkeytypes: []",
            "ssh_keys:",
            "  ed25519_private: |",
            f"    {private}",
            f"  ed25519_public: {public}",
        ]
    if expires is not None:
        deadline = int(datetime.fromisoformat(expires).timestamp())
        command = (
            f'left=$(( ({deadline} - $(date +%s)) / 60 )); [ "$left" -gt 0 ] || left=0; shutdown -h "+$left"'
        )
        lines += ["bootcmd:", f"  - [sh, -c, '{command}']"]
    return "\n".join(lines) + "\n"


class Ec2Node(MachineNode):
    """A node that is an EC2 instance; see :mod:`nodeprov_ec2`. Suspending it stops the
    instance (its disk stays, no compute is billed); waking starts it and waits for SSH."""

    def __init__(
        self, *, provider: Ec2Provider, instance: dict[str, Any], ssh: SshNode | None = None
    ) -> None:
        labels = _labels(instance)
        directory = labels.get(LABEL_NODE_DIR, "")
        settings = provider.settings
        # Without SSH, what its tags tell; its record adds NodeConfig.env once connected.
        known = {"PATH": settings.path, "HOME": f"{directory}/home", **settings.env, NODE_MARKER: directory}
        super().__init__(
            ssh=ssh,
            suspended=instance["State"]["Name"] in _SUSPENDED,
            node_id=labels[LABEL_NODE_ID],
            provider=Ec2Provider.name,
            labels=labels,
            workdir=ssh.workdir if ssh else labels.get(LABEL_WORKDIR, "/"),
            base_env=ssh.base_env if ssh else known if directory else {},
            tool_paths=ssh.tool_paths if ssh else {},
        )
        self.instance_id: str = instance["InstanceId"]
        self._provider = provider

    async def _reach(self) -> SshNodes:
        return await self._provider.ssh_to(await self._provider.instance(self.node_id))

    async def _remove(self) -> None:
        await self._provider.terminate(self.node_id)

    async def _suspend(self) -> None:
        self._ssh = None
        await self._provider.stop(self.instance_id)

    async def _wake(self) -> None:
        instance = await self._provider.start(self.instance_id)
        self._ssh = None
        await self._provider.ssh_ready(await self._provider.ssh_to(instance))
        await self._connected()


class Ec2Provider(NodeProvider[Ec2Settings]):
    """Nodes as EC2 instances; see :mod:`nodeprov_ec2`."""

    name: ClassVar[str] = "ec2"
    settings_model: ClassVar[type[ProviderSettings]] = Ec2Settings

    def __init__(self, settings: Ec2Settings) -> None:
        super().__init__(settings)
        self._client: Any = None
        self._client_lock = anyio.Lock()
        self._ssh: dict[str, SshNodes] = {}

    # -- EC2 calls ----------------------------------------------------------------------

    async def client(self) -> Any:
        """boto3's EC2 client, made on first use (reading the shared files: in a thread)."""
        async with self._client_lock:
            if self._client is None:
                self._client = await _call(self._make_client, abandon=False)
            return self._client

    def _make_client(self) -> Any:
        settings = self.settings
        session = boto3.session.Session(profile_name=settings.profile, region_name=settings.region)
        config = botocore.config.Config(
            retries={"mode": settings.retry_mode, "total_max_attempts": settings.max_attempts},
            connect_timeout=10,
            read_timeout=60,
        )
        return session.client("ec2", endpoint_url=settings.endpoint_url, config=config)

    async def _make(self, method: str, **kwargs: Any) -> Any:
        """A call that creates something: waited for even when cancelled (see :func:`_call`)."""
        return await _call(functools.partial(getattr(await self.client(), method), **kwargs), abandon=False)

    async def _ask(self, method: str, **kwargs: Any) -> Any:
        """A call that reads or removes: abandoned when cancelled, so deadlines hold."""
        return await _call(functools.partial(getattr(await self.client(), method), **kwargs), abandon=True)

    async def _instances(self, *filters: dict[str, Any]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = await self._ask(
                "describe_instances",
                Filters=[{"Name": "instance-state-name", "Values": _LIVE}, *filters],
                **({"NextToken": token} if token else {}),
            )
            found += [
                instance for reservation in page["Reservations"] for instance in reservation["Instances"]
            ]
            token = page.get("NextToken")
            if not token:
                return found

    async def instance(self, node_id: str) -> dict[str, Any]:
        """The live instance of ``node_id``.

        Raises:
            NodeGoneError: there is none (never made, or terminated).
        """
        found = await self._instances({"Name": f"tag:{LABEL_NODE_ID}", "Values": [node_id]})
        if not found:
            raise NodeGoneError(f"no ec2 node {node_id}")
        if len(found) > 1:
            logger.warning("node %s has %d instances: using the oldest", node_id, len(found))
        return min(found, key=lambda instance: instance["LaunchTime"])

    async def _until_state(self, instance_id: str, states: set[str], deadline: float) -> dict[str, Any]:
        delay = 0.2
        while True:
            page = await self._ask("describe_instances", InstanceIds=[instance_id])
            instance: dict[str, Any] = page["Reservations"][0]["Instances"][0]
            state = instance["State"]["Name"]
            if state in states:
                return instance
            if state in ("terminated", "shutting-down") and "terminated" not in states:
                raise NodeGoneError(f"instance {instance_id} is {state}")
            if time.monotonic() + delay > deadline:
                raise ProviderError(
                    f"instance {instance_id} is still {state}, not {'/'.join(sorted(states))}"
                )
            await anyio.sleep(delay)
            delay = min(delay * 2, 5.0)

    # -- SSH ----------------------------------------------------------------------------

    async def ssh_to(self, instance: dict[str, Any]) -> SshNodes:
        """The SSH side of ``instance``: its address, one shared connection."""
        host = self.settings.connect_to or instance.get(
            "PublicIpAddress" if self.settings.address == "public" else "PrivateIpAddress"
        )
        if not host:
            raise ProviderError(f"instance {instance['InstanceId']} has no {self.settings.address} address")
        settings = self.settings
        if pinned := _labels(instance).get(LABEL_HOST_KEY):  # the key it was given at launch
            settings = settings.model_copy(update={"host_key": pinned})
        key = f"{host} {settings.host_key or ''}"
        if key not in self._ssh:
            self._ssh[key] = SshNodes(self.name, Link(host, settings), settings)
        return self._ssh[key]

    async def ssh_ready(self, nodes: SshNodes) -> None:
        """Wait, with backoff, until the instance's sshd lets us in (a booting instance
        refuses, then its keys arrive), within ``ready_timeout``. A host key that is not the
        instance's fails at once: waiting cannot make it right, and it may be someone
        else's machine answering at that address."""
        deadline = time.monotonic() + self.settings.ready_timeout
        delay = 0.5
        while True:
            try:
                await nodes.root()
                return
            except SshHostKeyError:
                raise
            except NodeprovError as error:
                if time.monotonic() + delay > deadline:
                    raise ProvisionError(f"{nodes.link.host} did not answer SSH in time: {error}") from None
                logger.debug("waiting for SSH on %s: %s", nodes.link.host, error)
            await anyio.sleep(delay)
            delay = min(delay * 2, 10.0)

    # -- the contract -------------------------------------------------------------------

    async def _provision(self, config: NodeConfig) -> NodeHandle:
        try:
            return await self._create(config)
        except (ProvisionError, ConfigError):
            raise
        except NodeprovError as error:
            raise ProvisionError(f"cannot provision node {config.node_id}: {error}") from None

    async def _create(self, config: NodeConfig) -> Ec2Node:
        settings = self.settings
        if not settings.image_id:
            raise ConfigError("the ec2 provider needs an AMI (setting 'image_id')")
        labels = config.resource_labels()
        deadline = time.monotonic() + settings.ready_timeout
        found: dict[str, Any] | None = None
        with suppress(NodeGoneError):
            found = await self.instance(config.node_id)
        if found is not None and not config.made_by_this(_labels(found)):
            raise ProvisionError(f"node {config.node_id} exists already (instance {found['InstanceId']})")
        async with Rollback(timeout=300) as rollback:
            # First: whatever a cancelled or failed attempt of this provision made goes, found
            # by its tags (never another provision's, of the same node id).
            rollback.push(functools.partial(self.terminate, config.node_id, made_by=config))
            if found is not None:
                # This provision, cut off after RunInstances (a control plane that died, a
                # retry): its instance is adopted, as EC2's ClientToken would within its window.
                logger.info("node %s: adopting instance %s", config.node_id, found["InstanceId"])
                instance = found
            else:
                instance = await self._launch(config, labels)
            instance = await self._until_state(instance["InstanceId"], {"running"}, deadline)
            nodes = await self.ssh_to(instance)
            await self.ssh_ready(nodes)
            ssh = await nodes.create(config)  # adopts the node directory only if this provision made it
            where = {LABEL_WORKDIR: ssh.workdir, LABEL_NODE_DIR: ssh.directory}
            await self._make("create_tags", Resources=[instance["InstanceId"]], Tags=_tags(where))
            instance.setdefault("Tags", []).extend(_tags(where))
            return Ec2Node(provider=self, instance=instance, ssh=ssh)

    async def _launch(self, config: NodeConfig, labels: dict[str, str]) -> dict[str, Any]:
        settings = self.settings
        key_name = settings.key_name or await self._import_key(config.node_id, labels)
        groups = settings.security_group_ids or [await self._make_group(config.node_id, labels)]
        network: dict[str, Any] = {"SecurityGroupIds": groups}
        # A host key of its own, unless one is pinned or checking is off: known before the
        # first connection, so the check stays strict on a machine nobody has seen.
        host_key = None
        instance_labels = labels
        if settings.host_key is None and not settings.insecure_skip_host_key_check:
            host_key = asyncssh.generate_private_key("ssh-ed25519")
            public = host_key.export_public_key().decode().strip()
            instance_labels = {**labels, LABEL_HOST_KEY: public}
        if settings.subnet_id:
            network["SubnetId"] = settings.subnet_id
        launched = await self._make(
            "run_instances",
            ImageId=settings.image_id,
            InstanceType=settings.instance_type,
            MinCount=1,
            MaxCount=1,
            KeyName=key_name,
            ClientToken=client_token(config),
            UserData=_user_data(labels.get(LABEL_EXPIRES_AT), host_key),
            InstanceInitiatedShutdownBehavior="terminate",
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": _tags(instance_labels)},
                {"ResourceType": "volume", "Tags": _tags(labels)},
            ],
            **network,
        )
        instance: dict[str, Any] = launched["Instances"][0]
        logger.info("node %s: launched instance %s", config.node_id, instance["InstanceId"])
        return instance

    async def _import_key(self, node_id: str, labels: dict[str, str]) -> str:
        """Import the public key of ``key_files[0]`` as the node's own key pair."""
        files = self.settings.key_files
        if not files:
            raise ConfigError("the ec2 provider needs key_name, or key_files whose first key it imports")
        public = await anyio.to_thread.run_sync(_public_key, files[0])
        name = f"nodeprov-{node_id}"
        with suppress(_DuplicateError):  # made by a provision of this node that died
            await self._make(
                "import_key_pair",
                KeyName=name,
                PublicKeyMaterial=public,
                TagSpecifications=[{"ResourceType": "key-pair", "Tags": _tags(labels)}],
            )
        return name

    async def _make_group(self, node_id: str, labels: dict[str, str]) -> str:
        """A security group of the node's own that lets SSH in from ``ssh_cidr``."""
        cidr = self.settings.ssh_cidr
        if not cidr:
            raise ConfigError(
                "the ec2 provider makes a security group only with ssh_cidr (who may SSH in); "
                "or give security_group_ids"
            )
        name = f"nodeprov-{node_id}"
        vpc: dict[str, Any] = {}
        if self.settings.subnet_id:
            subnets = await self._ask("describe_subnets", SubnetIds=[self.settings.subnet_id])
            vpc["VpcId"] = subnets["Subnets"][0]["VpcId"]
        try:
            made = await self._make(
                "create_security_group",
                GroupName=name,
                Description=f"nodeprov node {node_id}: SSH in",
                TagSpecifications=[{"ResourceType": "security-group", "Tags": _tags(labels)}],
                **vpc,
            )
        except _DuplicateError:
            found = await self._ask(
                "describe_security_groups", Filters=[{"Name": "group-name", "Values": [name]}]
            )
            return str(found["SecurityGroups"][0]["GroupId"])
        group = str(made["GroupId"])
        await self._make(
            "authorize_security_group_ingress",
            GroupId=group,
            IpPermissions=[
                {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": cidr}]}
            ],
        )
        return group

    async def stop(self, instance_id: str) -> None:
        """Stop the instance and wait until it is stopped."""
        await self._ask("stop_instances", InstanceIds=[instance_id])
        await self._until_state(instance_id, {"stopped"}, time.monotonic() + self.settings.ready_timeout)

    async def start(self, instance_id: str) -> dict[str, Any]:
        """Start a stopped instance (waiting for a stop under way) and wait until it runs."""
        deadline = time.monotonic() + self.settings.ready_timeout
        instance = await self._until_state(instance_id, {"stopped", "running", "pending"}, deadline)
        if instance["State"]["Name"] == "stopped":
            await self._make("start_instances", InstanceIds=[instance_id])
        return await self._until_state(instance_id, {"running"}, deadline)

    async def terminate(self, node_id: str, *, made_by: NodeConfig | None = None) -> None:
        """Terminate every instance of ``node_id`` (only those ``made_by`` that provision
        made, when given), confirm it twice, then delete the key pair and security group
        nodeprov made for it (likewise). Fine if nothing is left."""
        mine: list[dict[str, Any]] = []
        if made_by is not None:
            mine = [{"Name": f"tag:{LABEL_PROVISION}", "Values": [made_by.provision_mark]}]
        instances = await self._instances({"Name": f"tag:{LABEL_NODE_ID}", "Values": [node_id]}, *mine)
        ids = [instance["InstanceId"] for instance in instances]
        if ids:
            await self._ask("terminate_instances", InstanceIds=ids)
            deadline = time.monotonic() + self.settings.ready_timeout
            for instance_id in ids:
                for _ in range(2):  # twice: a reply may come from a replica that lags
                    await self._until_state(instance_id, {"terminated"}, deadline)
        name = f"nodeprov-{node_id}"
        if not self.settings.key_name:
            with suppress(NodeGoneError):
                pairs = await self._ask(
                    "describe_key_pairs", Filters=[{"Name": "key-name", "Values": [name]}, *mine]
                )
                for pair in pairs["KeyPairs"]:
                    await self._ask("delete_key_pair", KeyName=pair["KeyName"])
        if not self.settings.security_group_ids:
            found = await self._ask(
                "describe_security_groups", Filters=[{"Name": "group-name", "Values": [name]}, *mine]
            )
            for group in found["SecurityGroups"]:
                await self._delete_group(group["GroupId"])

    async def _delete_group(self, group_id: str) -> None:
        delay = 1.0
        for _ in range(8):  # the instance's network interface lets go of it a little later
            try:
                await self._ask("delete_security_group", GroupId=group_id)
                return
            except NodeGoneError:
                return
            except _DependencyError:
                await anyio.sleep(delay)
                delay = min(delay * 2, 15)
        logger.warning("security group %s is still in use: left behind", group_id)

    async def list_nodes(self) -> list[NodeInfo]:
        instances = await self._instances({"Name": "tag-key", "Values": [LABEL_NODE_ID]})
        return [
            NodeInfo(_labels(i)[LABEL_NODE_ID], self.name, _labels(i), i["State"]["Name"]) for i in instances
        ]

    async def attach(self, node_id: str) -> NodeHandle:
        return Ec2Node(provider=self, instance=await self.instance(node_id))

    @classmethod
    def requirements(cls) -> list[Requirement]:
        found = [name for name in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE") if os.environ.get(name)]
        found += [str(path) for path in (Path.home() / ".aws" / "credentials",) if path.is_file()]
        return [
            Requirement(
                "AWS credentials",
                bool(found),
                ", ".join(found) or "none in the environment or ~/.aws (an instance role does not show here)",
            )
        ]

    async def probe(self) -> None:
        """Ask EC2 with these settings (credentials, region, endpoint); check the AMI and
        the key pair they name, and the key to import otherwise.

        Raises:
            ConfigError: no credentials or region, refused, no such AMI or key pair, no key.
            ProviderError: EC2 could not be reached.
        """
        settings = self.settings
        await self._ask("describe_instances", MaxResults=5)
        if settings.image_id:
            try:
                await self._ask("describe_images", ImageIds=[settings.image_id])
            except NodeGoneError:
                raise ConfigError(f"no AMI {settings.image_id} in this region") from None
        if settings.key_name:
            try:
                await self._ask("describe_key_pairs", KeyNames=[settings.key_name])
            except NodeGoneError:
                raise ConfigError(f"no key pair {settings.key_name} in this region") from None
        elif not settings.key_files:
            raise ConfigError("no key: set key_name, or key_files whose first key is imported")
        else:
            await anyio.to_thread.run_sync(_public_key, settings.key_files[0])

    async def aclose(self) -> None:
        nodes, self._ssh = list(self._ssh.values()), {}
        for each in nodes:
            await each.link.aclose()


def _public_key(private_key_file: str) -> bytes:
    """The OpenSSH public key of a private key file: the ``.pub`` beside it, else derived."""
    path = Path(private_key_file).expanduser()
    beside = path.with_name(path.name + ".pub")
    if beside.is_file():
        return beside.read_bytes()
    try:
        return bytes(asyncssh.read_private_key(str(path)).export_public_key())
    except (OSError, asyncssh.KeyImportError) as error:
        raise ConfigError(f"cannot read key {path}: {error}") from None


class _DuplicateError(ProviderError):
    """EC2 answered that the resource exists already."""


class _DependencyError(ProviderError):
    """EC2 answered that something still uses the resource."""


async def _call(call: Callable[[], T], *, abandon: bool) -> T:
    """``call`` (boto3) in a worker thread, its errors mapped into nodeprov's tree."""
    try:
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=abandon)
    except botocore.exceptions.ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        message = f"EC2: {error}"
        if code.endswith((".NotFound", "NotFound")):
            raise NodeGoneError(message) from None
        if code.endswith(".Duplicate"):
            raise _DuplicateError(message) from None
        if code == "DependencyViolation":
            raise _DependencyError(message) from None
        if code in ("AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "OptInRequired"):
            raise ConfigError(message) from None
        raise ProviderError(message) from None
    except (botocore.exceptions.NoCredentialsError, botocore.exceptions.ProfileNotFound) as error:
        raise ConfigError(f"EC2 credentials: {error}") from None
    except botocore.exceptions.NoRegionError:
        raise ConfigError("EC2: no region (set region, AWS_REGION or the profile's region)") from None
    except (botocore.exceptions.BotoCoreError, OSError) as error:
        raise ProviderError(f"EC2 not reachable: {error}") from None

"""The conformance suite every provider passes.

Subclass :class:`ProviderConformance` in a test module of the provider and supply two
fixtures, ``provider`` (a configured :class:`~nodeprov.node.NodeProvider`) and
``leftovers`` (an async function ``(node_id) -> list[str]`` describing whatever of that
node still exists on the platform: directories, containers, instances, processes)::

    class TestLocal(ProviderConformance):
        @pytest.fixture
        def provider(self, tmp_path): ...
        @pytest.fixture
        def leftovers(self): ...

Nodes run ``sh``, ``cat``, ``env``, ``printf``, ``pwd``, ``mkdir``, ``ls``, ``stat``,
``tar``, ``head``, ``ln``, ``readlink`` and ``sleep`` from their PATH. Processes are matched
by a unique ``sleep`` duration: :meth:`ProviderConformance.processes_matching` scans this
machine's ``/proc`` (which sees local children and containers alike); a provider whose
processes run elsewhere overrides it.

The 1 GiB file round trip runs in a child process that attaches to the node with the
provider's settings (given on its stdin, never its arguments) and bounds its own peak
memory; ``NODEPROV_BIG_FILE_MIB`` sets the size.
"""

from .files import FileConformance
from .kit import (
    HOSTILE_STRINGS,
    AnyProvider,
    Leftovers,
    host_processes_matching,
    outside_of,
    read_all,
    run,
    unique_marker,
    wait_until,
)
from .prepared import PreparedConformance
from .suite import ProviderConformance

__all__ = [
    "HOSTILE_STRINGS",
    "AnyProvider",
    "FileConformance",
    "Leftovers",
    "PreparedConformance",
    "ProviderConformance",
    "host_processes_matching",
    "outside_of",
    "read_all",
    "run",
    "unique_marker",
    "wait_until",
]

"""The Codespaces provider: a node is a GitHub Codespace, driven with the gh CLI (every call
an argument list, JSON read where gh offers it) and reached over SSH with the SSH provider's
machinery (:mod:`nodeprov_ssh`) through ``gh codespace ssh -c NAME --stdio`` as the
connection's tunnel: no port is opened anywhere.

- Provision looks the node's codespace up by its display name first (``nodeprov-NODE_ID``:
  codespaces carry no labels; a control plane that died after creating one left it: it is
  adopted, never doubled), else runs ``gh codespace create`` with the repository, machine,
  branch, devcontainer and location of the settings and always an explicit idle timeout
  and retention period, so that GitHub itself stops and then deletes a codespace whose
  control plane is lost. It waits for ``Available`` (with backoff, within
  ``ready_timeout``), then makes the node's directory there over SSH (labels, record and
  a lifetime watchdog, as on any SSH host). A codespace that does not start is deleted.
- Spawn and files go over SSH: quoting, process groups, stopping through a second session,
  the environment never on a command line.
- Suspend is ``gh codespace stop``; wake connects again, which starts it.
- Destroy is ``gh codespace delete --force``, confirmed by looking it up.

gh's and asyncssh's exceptions never leave this package.
"""

from nodeprov_codespaces.provider import CodespaceNode, CodespacesProvider, CodespacesSettings

__all__ = ["CodespaceNode", "CodespacesProvider", "CodespacesSettings"]

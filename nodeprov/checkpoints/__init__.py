"""Checkpoints of a workspace: its files captured from a node over the exec channel, stored
as content-addressed pieces in an object store (only what changed since the checkpoint
before), and restored onto any node of any provider.

::

    async with open_objects("file:///var/lib/nodeprov/checkpoints") as objects:
        first = await capture(node, objects)
        later = await capture(node, objects, previous=first.manifest)  # stores what changed
        await restore(other_node, later.manifest, objects)

See :mod:`nodeprov.checkpoints.capturing` for what a capture keeps and leaves out,
:mod:`nodeprov.checkpoints.restoring` for how a restore replaces a workspace, and
:mod:`nodeprov.checkpoints.tar` for what an archive may hold.
"""

from .capturing import SECRET_PATTERNS, Capture, capture
from .manifest import Changes, Entry, Manifest, Piece, changes
from .objects import DirectoryObjects, ObjectStore, open_objects
from .restoring import restore

__all__ = [
    "SECRET_PATTERNS",
    "Capture",
    "Changes",
    "DirectoryObjects",
    "Entry",
    "Manifest",
    "ObjectStore",
    "Piece",
    "capture",
    "changes",
    "open_objects",
    "restore",
]

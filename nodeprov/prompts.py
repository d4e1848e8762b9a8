"""Prompts: what a run or a turn asks its agent, as text or as content blocks.

A :data:`Prompt` is a ``str``, or a sequence of :class:`TextBlock` and :class:`ImageBlock`
(text and images, in order: screenshots and mock-ups for models that see). Every agent takes
the same prompt; each passes images the way its CLI takes them (Claude: image blocks of its
user message; Codex and OpenCode: files written to the node and attached). Before anything
is provisioned, :meth:`nodeprov.agents.Agent.prepare_prompt` checks a prompt's images against
the model (:attr:`~nodeprov.agents.ModelInfo.vision`) and the limits of the model's API
(:class:`ImageLimits`).

A run keeps its images once each, by content hash, beside its record: its events and its
record name an image by :meth:`ImageBlock.ref` (hash, media type, size), never inline.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeAlias

from .errors import ConfigError

__all__ = [
    "ANTHROPIC_IMAGE_LIMITS",
    "MEDIA_TYPES",
    "OPENAI_IMAGE_LIMITS",
    "Block",
    "ImageBlock",
    "ImageLimits",
    "Prompt",
    "TextBlock",
    "prompt_blocks",
    "prompt_images",
    "prompt_text",
]

MEDIA_TYPES: dict[str, str] = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
}
"""The image media types nodeprov recognises, with a file suffix for each: those that every
model API it speaks to accepts (Anthropic's Messages, OpenAI's Responses and Chat
Completions)."""


@dataclass(frozen=True)
class TextBlock:
    """Text of a prompt."""

    text: str


@dataclass(frozen=True)
class ImageBlock:
    """An image of a prompt: its bytes and media type (one of :data:`MEDIA_TYPES`).

    Build one with :meth:`from_bytes` or :meth:`from_file`, which tell the media type from
    the bytes themselves; a media type given by hand is checked against the model's API
    (:class:`ImageLimits`) when the prompt is prepared."""

    data: bytes = field(repr=False)
    media_type: str

    @classmethod
    def from_bytes(cls, data: bytes) -> ImageBlock:
        """The image of ``data``, its media type read from its first bytes.

        Raises:
            ConfigError: ``data`` is not a PNG, JPEG, GIF or WebP image.
        """
        media_type = _sniff_media_type(data)
        if media_type is None:
            raise ConfigError("not a PNG, JPEG, GIF or WebP image")
        return cls(data, media_type)

    @classmethod
    def from_file(cls, path: str | Path) -> ImageBlock:
        """The image in the file at ``path`` (read now; a blocking call, for a CLI or a
        script: in async code, read the bytes in a worker thread and use :meth:`from_bytes`).

        Raises:
            ConfigError: the file cannot be read, or is not a PNG, JPEG, GIF or WebP image.
        """
        try:
            data = Path(path).read_bytes()
        except OSError as error:
            raise ConfigError(f"image {path}: {error.strerror or error}") from None
        try:
            return cls.from_bytes(data)
        except ConfigError as error:
            raise ConfigError(f"image {path}: {error}") from None

    @cached_property
    def sha256(self) -> str:
        """The hex SHA-256 of the bytes: the image's name in a run's store."""
        return hashlib.sha256(self.data).hexdigest()

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def filename(self) -> str:
        """A file name for the image on a node: its hash and its media type's suffix."""
        return self.sha256 + MEDIA_TYPES.get(self.media_type, ".img")

    def ref(self) -> dict[str, Any]:
        """The image as a run's record and events name it: ``{"type": "image", "sha256",
        "media_type", "size"}``."""
        return {"type": "image", "sha256": self.sha256, "media_type": self.media_type, "size": self.size}


Block: TypeAlias = TextBlock | ImageBlock
Prompt: TypeAlias = str | Sequence[Block]


def prompt_blocks(prompt: Prompt) -> tuple[Block, ...]:
    """``prompt`` as blocks: a string is one text block.

    Raises:
        ConfigError: an item of the sequence is not a block.
    """
    if isinstance(prompt, str):
        return (TextBlock(prompt),)
    blocks = tuple(prompt)
    for block in blocks:
        if not isinstance(block, TextBlock | ImageBlock):
            raise ConfigError(f"a prompt's blocks are TextBlock or ImageBlock, not {type(block).__name__}")
    return blocks


def prompt_text(prompt: Prompt) -> str:
    """The prompt's text: its text blocks, a blank line between two."""
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(block.text for block in prompt_blocks(prompt) if isinstance(block, TextBlock))


def prompt_images(prompt: Prompt) -> tuple[ImageBlock, ...]:
    """The prompt's images, in order."""
    if isinstance(prompt, str):
        return ()
    return tuple(block for block in prompt_blocks(prompt) if isinstance(block, ImageBlock))


def _sniff_media_type(data: bytes) -> str | None:
    """The media type the bytes' signature says, if one of :data:`MEDIA_TYPES`."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(frozen=True)
class ImageLimits:
    """What a model API accepts of one prompt's images: their media types, the size of each
    (bytes of the image, before any base64), their number, and their total size."""

    media_types: frozenset[str]
    max_bytes: int
    max_count: int
    max_total_bytes: int

    def check(self, images: Sequence[ImageBlock], api: str) -> None:
        """Refuse images ``api`` (named in the error) would refuse.

        Raises:
            ConfigError: one line, naming the first image that breaks a limit.
        """
        if len(images) > self.max_count:
            raise ConfigError(f"{len(images)} images: {api} takes at most {self.max_count} in one prompt")
        for number, image in enumerate(images, start=1):
            if image.media_type not in self.media_types:
                accepted = ", ".join(sorted(self.media_types))
                raise ConfigError(f"image {number} is {image.media_type}: {api} takes {accepted}")
            if image.size > self.max_bytes:
                raise ConfigError(
                    f"image {number} is {image.size} bytes: {api} takes at most {self.max_bytes} bytes "
                    "an image"
                )
        total = sum(image.size for image in images)
        if total > self.max_total_bytes:
            raise ConfigError(
                f"the images are {total} bytes in all: {api} takes at most {self.max_total_bytes} "
                "in one prompt"
            )


def _base64_budget(encoded: int) -> int:
    """The most bytes whose base64 fits in ``encoded`` bytes: APIs count encoded sizes."""
    return encoded // 4 * 3


ANTHROPIC_IMAGE_LIMITS = ImageLimits(
    media_types=frozenset(MEDIA_TYPES),
    max_bytes=_base64_budget(5 * 1024 * 1024),  # "image exceeds 5 MB maximum", counted in base64
    max_count=100,
    max_total_bytes=_base64_budget(32 * 1024 * 1024),  # the Messages API's request size
)
"""Anthropic's Messages API (Claude): 5 MB an image and 32 MB a request, both in base64, and
100 images a request."""

OPENAI_IMAGE_LIMITS = ImageLimits(
    media_types=frozenset(MEDIA_TYPES),  # a GIF must not be animated, which is not checked here
    max_bytes=_base64_budget(50 * 1024 * 1024),
    max_count=500,
    max_total_bytes=_base64_budget(50 * 1024 * 1024),  # 50 MB of payload a request
)
"""OpenAI's Responses and Chat Completions APIs: 50 MB of payload a request, 500 images."""

"""Prompts with images: blocks and their media types, the model APIs' limits, the agents'
refusals (before anything is provisioned), the store's images by hash, and a run's images
through a pause before its agent started (the fake agent on the fake provider)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov import ImageBlock, TextBlock, get_agent
from nodeprov.errors import ConfigError
from nodeprov.prompts import (
    ANTHROPIC_IMAGE_LIMITS,
    OPENAI_IMAGE_LIMITS,
    Block,
    ImageLimits,
    prompt_blocks,
    prompt_images,
    prompt_text,
)
from nodeprov.runs import Orchestrator, RunStarted, RunState
from nodeprov.store import Store
from nodeprov.testing import fake_agent_command
from nodeprov.testing.images import sample_png

pytestmark = pytest.mark.anyio


png = sample_png


SIGNATURES = {
    "image/png": png(),
    "image/jpeg": b"\xff\xd8\xff\xe0\0\x10JFIF\0",
    "image/gif": b"GIF89a\x01\0\x01\0",
    "image/webp": b"RIFF\x1a\0\0\0WEBPVP8 ",
}


@pytest.mark.parametrize("media_type", sorted(SIGNATURES))
def test_the_media_type_is_read_from_the_bytes(media_type: str) -> None:
    image = ImageBlock.from_bytes(SIGNATURES[media_type])
    assert image.media_type == media_type
    assert image.filename.startswith(image.sha256)
    assert image.ref() == {
        "type": "image",
        "sha256": image.sha256,
        "media_type": media_type,
        "size": image.size,
    }


@pytest.mark.parametrize("data", [b"BM\x1e\0\0\0", b"%PDF-1.7", b"", b"just text"])
def test_what_is_not_an_image_is_refused(data: bytes) -> None:
    with pytest.raises(ConfigError, match="not a PNG, JPEG, GIF or WebP image"):
        ImageBlock.from_bytes(data)


def test_a_file_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        ImageBlock.from_file(tmp_path / "missing.png")
    assert str(refused.value) == f"image {tmp_path / 'missing.png'}: No such file or directory"


def test_blocks_text_and_images() -> None:
    image = ImageBlock.from_bytes(png())
    prompt: list[Block] = [TextBlock("look"), image, TextBlock("then fix it")]
    assert prompt_blocks("hi") == (TextBlock("hi"),)
    assert prompt_text(prompt) == "look\n\nthen fix it"
    assert prompt_images(prompt) == (image,)
    assert prompt_images("hi") == ()
    with pytest.raises(ConfigError, match="not str"):
        prompt_blocks(["loose text"])  # type: ignore[list-item]


LIMITS = ImageLimits(frozenset({"image/png"}), max_bytes=100, max_count=2, max_total_bytes=150)


@pytest.mark.parametrize(
    ("images", "said"),
    [
        ([b"\x89PNG\r\n\x1a\n"] * 3, "3 images: the API takes at most 2 in one prompt"),
        ([b"GIF89a"], "image 1 is image/gif: the API takes image/png"),
        (
            [b"\x89PNG\r\n\x1a\n" + bytes(93)],
            "image 1 is 101 bytes: the API takes at most 100 bytes an image",
        ),
        (
            [b"\x89PNG\r\n\x1a\n" + bytes(80)] * 2,
            "the images are 176 bytes in all: the API takes at most 150",
        ),
    ],
)
def test_limits_refuse_with_one_line(images: list[bytes], said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        LIMITS.check([ImageBlock.from_bytes(data) for data in images], "the API")
    assert str(refused.value).startswith(said)
    assert "\n" not in str(refused.value)


def test_the_apis_limits_count_base64() -> None:
    assert ANTHROPIC_IMAGE_LIMITS.max_bytes * 4 // 3 <= 5 * 1024 * 1024
    assert OPENAI_IMAGE_LIMITS.max_total_bytes * 4 // 3 <= 50 * 1024 * 1024
    assert ANTHROPIC_IMAGE_LIMITS.media_types == OPENAI_IMAGE_LIMITS.media_types


def test_a_model_that_cannot_see_refuses_images_or_keeps_the_text() -> None:
    prompt: list[Block] = [TextBlock("what is wrong here?"), ImageBlock.from_bytes(png())]
    blind = get_agent("codex", {"model": "o3-mini"})
    with pytest.raises(ConfigError) as refused:
        blind.prepare_prompt(prompt)
    assert str(refused.value) == (
        "the codex agent cannot send images to model o3-mini: use a model that sees them, "
        "or the option images='text-only' to send the prompt's text alone"
    )
    assert blind.prepare_prompt("text alone is fine") == (TextBlock("text alone is fine"),)
    reduced = get_agent("codex", {"model": "o3-mini", "images": "text-only"})
    assert reduced.prepare_prompt(prompt) == (TextBlock("what is wrong here?"),)
    for seeing in (get_agent("codex", {"model": "gpt-5"}), get_agent("claude"), get_agent("codex")):
        assert seeing.prepare_prompt(prompt) == tuple(prompt)  # listed with vision, or not listed


def test_an_oversized_image_is_refused_by_the_agent() -> None:
    huge = ImageBlock.from_bytes(b"\x89PNG\r\n\x1a\n" + bytes(ANTHROPIC_IMAGE_LIMITS.max_bytes))
    with pytest.raises(
        ConfigError, match=r"^image 1 is \d+ bytes: the claude agent's model API takes at most"
    ):
        get_agent("claude").prepare_prompt([TextBlock("look"), huge])
    assert get_agent("codex").prepare_prompt([huge])  # OpenAI's APIs take it


def fake_run(tmp_path: Path, **settings: Any) -> dict[str, Any]:
    options = {
        "cli_path": fake_agent_command(tmp_path),
        "env": {"NODEPROV_FAKE_AGENT": json.dumps([{"text": "seen"}])},
    }
    provider_settings = {"root": str(tmp_path / "nodes"), **settings}
    return {"provider": "fake", "provider_settings": provider_settings, "options": options}


async def test_a_runs_images_are_kept_by_hash_and_reach_the_agent_after_a_pause(
    store: Store, tmp_path: Path
) -> None:
    """Paused while its node is provisioned, the run has no agent session: its resume starts
    the agent afresh with the first prompt, whose image is read back from the store."""
    image = ImageBlock.from_bytes(png(5, 4))
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            [TextBlock("what is on screen?"), image], **fake_run(tmp_path, provision_delay=3600)
        )
        with anyio.fail_after(30):
            snapshot = await run.pause("human", "before the agent starts")
        assert snapshot.agent_session_id is None
        record = await store.run(run.id)
        assert record is not None
        assert record.prompt == "what is on screen?"
        assert json.loads(record.prompt_blocks) == [
            {"type": "text", "text": "what is on screen?"},
            image.ref(),
        ]
        started = [e async for e in orchestrator.events(run.id) if isinstance(e, RunStarted)]
        assert started[0].images == (image.ref(),)

        resumed = await orchestrator.resume(
            snapshot.token, message="and now?", provider_settings={"provision_delay": 0}
        )
        with anyio.fail_after(60):
            assert await resumed.wait() == "ok", resumed.error
        record = await store.run(run.id)
        assert record is not None
        assert record.state == RunState.FINISHED
        assert record.project_key
        assert record.agent_session_id
    entries = await store.transcripts.load(
        {"project_key": record.project_key, "session_id": record.agent_session_id}
    )
    assert entries is not None
    user = next(entry for entry in entries if entry["type"] == "user")
    content = user["message"]["content"]
    assert [block["type"] for block in content] == ["text", "image", "text"]
    assert content[2]["text"] == "and now?"
    assert content[1]["source"]["media_type"] == "image/png"
    assert base64.b64decode(content[1]["source"]["data"]) == image.data  # byte for byte


async def test_a_refused_image_provisions_nothing_and_records_no_run(store: Store, tmp_path: Path) -> None:
    run = fake_run(tmp_path)
    run["options"]["model"] = "o3-mini"
    async with Orchestrator(store) as orchestrator:
        with pytest.raises(ConfigError, match="cannot send images to model o3-mini"):
            await orchestrator.start([TextBlock("look"), ImageBlock.from_bytes(png())], agent="codex", **run)
    assert await store.runs() == []
    assert not (tmp_path / "nodes").exists()

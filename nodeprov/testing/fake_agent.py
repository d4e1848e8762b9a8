"""A fake Claude Code CLI, for fast tests of what drives agents (runs, pauses, the bridge).

It speaks the CLI's stream-json protocol as the SDK's ``query()`` and ``ClaudeSDKClient``
expect it (through :class:`nodeprov.agents.claude.NodeTransport` or the SDK's own transport): it
answers the ``initialize`` and ``interrupt`` control requests (and any other with an empty
success; those of the subtypes ``NODEPROV_FAKE_AGENT_REFUSE`` names, comma-separated, with an
error, as a CLI that cannot honour them), and for each user message emits a ``system``
``init`` message, the scripted steps and a ``result``, between ``session_state_changed``
running/idle notices, shaped like the real CLI's. The session id is the one of
``--session-id ID`` or ``--resume ID`` in its arguments (unless ``--fork-session``), else a
fresh uuid. Every other flag is ignored.
At stdin EOF it exits: status 1 if the last result was an error, like the real CLI, else
0. Stdin EOF does not end a turn under way, as with the real CLI. User messages that come
during a turn are queued for the turns after it.

The script is ``NODEPROV_FAKE_AGENT``, a JSON list of steps that every user message runs
in order. Each step is an object with one key:

- ``{"text": "..."}``: an assistant message with that text.
- ``{"sleep": seconds}``: wait; an interrupt ends the turn meanwhile.
- ``{"stall": true}``: wait forever, like a model call that never answers, until
  interrupted or killed (stdin EOF does not end it).
- ``{"retry": "connection refused"}``: a ``system`` ``api_retry`` notice (``attempt``,
  ``max_retries``, ``retry_delay_ms``, ``error_status`` null, ``error``).
- ``{"error_result": "API Error: ..."}``: the turn ends at once as the CLI ends one on an
  API failure: a synthetic assistant message with that text, then a result with
  ``is_error`` true, subtype ``success`` and that ``result``.
- ``{"exit": code}``: exit at once with that status, without a result.
- ``{"garbage": "text"}``: write ``text`` as a raw stdout line. The bridge skips a line
  that does not start with ``{``, and fails on a malformed one that does.
- ``{"stderr": "text"}``: write a line to stderr.
- ``{"ignore_term": true}``: ignore SIGTERM from now on.
- ``{"deaf": true}``: answer no control request from now on, an interrupt included (a CLI
  stuck in a tool that never returns).
- ``{"close_stdout": true}``: close stdout but keep running (later output is lost).
- ``{"spawn": ["sh", "-c", "..."]}``: start a background child, like a Bash tool, with its
  standard streams on /dev/null.
- ``{"ask": "subtype"}``: send the SDK a control request of that subtype (``can_use_tool``
  for Bash, say) and wait for its answer, then say ``answered: SUBTYPE`` (the answer's
  subtype: success or error) as an assistant message.
- ``{"wait_for": "path"}``: wait until the file exists (relative to the working directory),
  like a tool call that waits for a spawned child's sign of life; an interrupt ends the
  turn meanwhile.
- ``{"write_file": ["path", "text"]}``: write a file (relative to the working directory),
  its parent directories too.
- ``{"read_file": "path"}``: an assistant message with the file's text, or ``missing: path``
  (a tool call that reads back what an earlier turn wrote).
- ``{"recall": true}``: an assistant message with the text of every user message its session's
  transcript holds, joined by `` | `` (what a resumed or forked session remembers).
- ``{"stream": [count, size, interval]}``: ``count`` assistant messages of ``size`` bytes of
  text, ``interval`` seconds apart (an interrupt ends the turn at the next message). Each text begins
  ``t=EPOCH `` with the wall-clock time it was sent, so a reader can measure relay latency.

Like the real CLI, it keeps the session's transcript (the user messages and assistant
messages, one JSON entry per line) in ``$CLAUDE_CONFIG_DIR/projects/KEY/SESSION.jsonl``
(``~/.claude`` without the variable; KEY is the working directory with every character but
letters and digits replaced by ``-``), and with ``--session-mirror`` sends each entry it
appends as a ``transcript_mirror`` frame (``filePath``, ``entries``) for the SDK's session
store.

An interrupt ends the turn as the real CLI does: a ``control_response`` with
``still_queued``, a user message ``[Request interrupted by user]``, and a result with
subtype ``error_during_execution`` and ``is_error`` true.

Run it with :func:`fake_agent_command` as the CLI path. It needs only the standard library
and imports nothing of nodeprov, so that it starts fast.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import sys
import threading
import time
import uuid
from typing import Any

__all__ = ["fake_agent_command"]

MODEL = "fake-model"
STEPS = {"text", "sleep", "stall", "retry", "error_result", "exit", "garbage", "stderr", "ignore_term"}
STEPS |= {"close_stdout", "spawn", "wait_for", "write_file", "read_file", "stream", "deaf", "ask", "recall"}
_USAGE = {
    "input_tokens": 10,
    "output_tokens": 5,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}


def fake_agent_command(directory: str | os.PathLike[str]) -> str:
    """Write an executable ``fake-agent`` wrapper into ``directory``; return its path.

    The wrapper runs this module with the current Python interpreter (``-I -S``: nothing of
    the environment or site-packages), so it works as a ``cli_path`` on a node whose PATH
    has no Python, such as a local node's.
    """
    from shlex import quote  # not needed by the agent itself, which should start fast

    path = os.path.join(directory, "fake-agent")
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "w") as wrapper:
        wrapper.write(f'#!/bin/sh\nexec {quote(sys.executable)} -I -S {quote(__file__)} "$@"\n')
    os.chmod(partial, 0o700)
    os.replace(partial, path)  # never opened for writing while an agent runs it (ETXTBSY)
    return path


class _InterruptError(Exception):
    pass


class _Agent:
    def __init__(self, argv: list[str], steps: list[dict[str, Any]]) -> None:
        def flag(name: str) -> str | None:  # "--name value" or "--name=value"
            for index, arg in enumerate(argv):
                if arg == name and index + 1 < len(argv):
                    return argv[index + 1]
                if arg.startswith(name + "="):
                    return arg[len(name) + 1 :]
            return None

        resumed = None if "--fork-session" in argv else flag("--resume")
        self.session_id = flag("--session-id") or resumed or str(uuid.uuid4())
        self.permission_mode = flag("--permission-mode") or "default"
        self.steps = steps
        self.inbox: queue.Queue[bytes | None] = queue.Queue()
        self.queued: list[dict[str, Any]] = []  # user messages that came during a turn
        self.eof = False
        self.deaf = False
        self.refused = set(filter(None, os.environ.get("NODEPROV_FAKE_AGENT_REFUSE", "").split(",")))
        self.answers: dict[str, str] = {}  # answers to its own control requests, by id
        self.turns = 0
        self.mirror = "--session-mirror" in argv
        config = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.expanduser("~/.claude")
        project = re.sub(r"[^a-zA-Z0-9]", "-", os.getcwd())  # the CLI's key for paths under 200 chars
        self.transcript = os.path.join(config, "projects", project, f"{self.session_id}.jsonl")
        self.last_entry: str | None = None
        self.transcript_fd: int | None = None
        self.cwd = os.getcwd()

    def write(self, data: bytes) -> None:
        try:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        except (OSError, ValueError):
            pass  # stdout is closed (a close_stdout step, or the reader went away)

    def emit(self, message: dict[str, Any]) -> None:
        self.write(json.dumps(message).encode() + b"\n")

    def record(self, kind: str, message: dict[str, Any], uuid: str) -> bytes:
        """Append an entry to the transcript file; return its mirror frame (empty unless
        mirroring), for the caller to write with the message it belongs to."""
        entry = {
            "type": kind,
            "uuid": uuid,
            "parentUuid": self.last_entry,
            "sessionId": self.session_id,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "cwd": self.cwd,
            "message": message,
        }
        self.last_entry = uuid
        try:
            if self.transcript_fd is None:
                os.makedirs(os.path.dirname(self.transcript), exist_ok=True)
                self.transcript_fd = os.open(self.transcript, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.write(self.transcript_fd, json.dumps(entry, separators=(",", ":")).encode() + b"\n")
        except OSError:
            return b""  # a config directory it cannot write: the real CLI goes on without one too
        if not self.mirror:
            return b""
        frame = {"type": "transcript_mirror", "filePath": self.transcript, "entries": [entry]}
        return json.dumps(frame).encode() + b"\n"

    def system(self, subtype: str, **fields: Any) -> None:
        self.emit(
            {"type": "system", "subtype": subtype, **fields, "session_id": self.session_id, "uuid": _uid()}
        )

    def read_stdin(self) -> None:
        for line in sys.stdin.buffer:
            self.inbox.put(line)
        self.inbox.put(None)

    def wait(self, seconds: float | None, in_turn: bool = True) -> dict[str, Any] | None:
        """Serve input for ``seconds`` (``None``: until a user message comes, or forever in
        a turn). Return a user message that arrived outside a turn; raise _InterruptError on
        an interrupt during a turn."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self.eof and not in_turn:
                return None
            try:
                line = self.inbox.get(timeout=timeout)
            except queue.Empty:
                return None
            if line is None:
                self.eof = True
                continue
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            if message.get("type") == "user":
                if not in_turn:
                    return dict(message)
                self.queued.append(message)
            elif message.get("type") == "control_request":
                self.control(message, in_turn)
            elif message.get("type") == "control_response":
                response = message.get("response") or {}
                self.answers[str(response.get("request_id"))] = str(response.get("subtype"))

    def control(self, message: dict[str, Any], in_turn: bool) -> None:
        if self.deaf:
            return
        subtype = message.get("request", {}).get("subtype")
        if subtype in self.refused:
            refusal = {"subtype": "error", "request_id": message.get("request_id")}
            refusal["error"] = f"no {subtype} now"
            self.emit({"type": "control_response", "response": refusal})
            return
        response: dict[str, Any] = {}
        if subtype == "initialize":
            response = {
                "commands": [],
                "agents": [],
                "models": [],
                "output_style": "default",
                "pid": os.getpid(),
            }
        elif subtype == "interrupt":
            response = {"still_queued": []}
        self.emit(
            {
                "type": "control_response",
                "response": {
                    "subtype": "success",
                    "request_id": message.get("request_id"),
                    "response": response,
                },
            }
        )
        if subtype == "interrupt" and in_turn:
            raise _InterruptError

    def result(self, started: float, subtype: str = "success", **fields: Any) -> None:
        duration = int((time.monotonic() - started) * 1000)
        self.emit(
            {
                "type": "result",
                "subtype": subtype,
                "is_error": False,
                "duration_ms": duration,
                "duration_api_ms": duration,
                "num_turns": self.turns,
                "session_id": self.session_id,
                "stop_reason": "end_turn",
                "total_cost_usd": 0.0001,
                "usage": _USAGE,
                "modelUsage": {MODEL: {"inputTokens": 10, "outputTokens": 5, "costUSD": 0.0001}},
                "permission_denials": [],
                "terminal_reason": "completed",
                "uuid": _uid(),
                **fields,
            }
        )
        self.system("session_state_changed", state="idle", sdk_host_only=True)

    def assistant(self, text: str, **fields: Any) -> None:
        message = {
            "id": f"msg_{_uid()}",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [{"type": "text", "text": text}],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _USAGE,
        }
        uuid = _uid()
        line = {
            "type": "assistant",
            "message": message,
            "parent_tool_use_id": None,
            "session_id": self.session_id,
            "uuid": uuid,
            **fields,
        }
        self.write(json.dumps(line).encode() + b"\n" + self.record("assistant", message, uuid))

    def turn(self, prompt: dict[str, Any]) -> bool:
        """Run the steps for one user message; return whether the result is an error."""
        started, said, retries = time.monotonic(), "", 0
        self.turns += 1
        self.write(self.record("user", prompt.get("message") or {}, _uid()))
        self.system("session_state_changed", state="running", sdk_host_only=True)
        self.system(
            "init",
            cwd=os.getcwd(),
            tools=[],
            mcp_servers=[],
            model=MODEL,
            permissionMode=self.permission_mode,
        )
        try:
            for step in self.steps:
                self.wait(0)  # an interrupt that came meanwhile
                [(kind, value)] = step.items()
                if kind == "text":
                    self.assistant(value)
                    said = value
                elif kind in ("sleep", "stall"):
                    self.wait(None if kind == "stall" else float(value))
                elif kind == "retry":
                    retries += 1
                    fields = {"attempt": retries, "max_retries": 10, "retry_delay_ms": 500}
                    self.system("api_retry", **fields, error_status=None, error=value)
                elif kind == "error_result":
                    self.assistant(value, error="unknown", is_api_error_message=True)
                    self.result(
                        started,
                        is_error=True,
                        result=value,
                        stop_reason="stop_sequence",
                        api_error_status=None,
                    )
                    return True
                elif kind == "exit":
                    os._exit(int(value))  # everything written is flushed already
                elif kind == "garbage":
                    self.write(str(value).encode() + b"\n")
                elif kind == "stderr":
                    print(value, file=sys.stderr, flush=True)
                elif kind == "ignore_term":
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                elif kind == "deaf":
                    self.deaf = True
                elif kind == "close_stdout":  # /dev/null in its place: no file opened later gets fd 1
                    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
                elif kind == "spawn":
                    import subprocess

                    subprocess.Popen(  # noqa: S603 - a test's script asks the fake agent to spawn this
                        value, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                    )
                elif kind == "wait_for":
                    while not os.path.exists(value):
                        self.wait(0.02)
                elif kind == "ask":
                    asked = f"req_ask_{len(self.answers)}_{_uid()[:8]}"
                    request = {"subtype": value, "tool_name": "Bash", "input": {"command": "true"}}
                    self.emit({"type": "control_request", "request_id": asked, "request": request})
                    while asked not in self.answers:
                        self.wait(0.02)
                    self.assistant(f"answered: {self.answers[asked]}")
                elif kind == "stream":
                    count, size, interval = value
                    padding = "x" * int(size)
                    for index in range(int(count)):
                        if index:  # a plain sleep costs far less than a timed wait on the inbox
                            time.sleep(float(interval))
                            self.wait(0)
                        stamp = f"t={time.time():.6f} "
                        said = stamp + padding[len(stamp) :]
                        self.assistant(said)
                elif kind == "recall":
                    self.assistant(" | ".join(self.prompts()))
                elif kind == "read_file":
                    try:
                        with open(value) as file:
                            self.assistant(file.read())
                    except FileNotFoundError:
                        self.assistant(f"missing: {value}")
                else:  # write_file
                    if os.path.dirname(value[0]):
                        os.makedirs(os.path.dirname(value[0]), exist_ok=True)
                    with open(value[0], "w") as file:
                        file.write(value[1])
        except _InterruptError:
            self.emit(
                {
                    "type": "user",
                    "message": {
                        "role": "user",
                        "content": [{"type": "text", "text": "[Request interrupted by user]"}],
                    },
                    "parent_tool_use_id": None,
                    "session_id": self.session_id,
                    "uuid": _uid(),
                }
            )
            errors = ["[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null"]
            self.result(
                started,
                "error_during_execution",
                is_error=True,
                stop_reason=None,
                terminal_reason="aborted_streaming",
                errors=errors,
            )
            return True
        self.result(started, result=said)
        return False

    def prompts(self) -> list[str]:
        """The texts of the user messages in the session's transcript, in order."""
        texts = []
        with open(self.transcript) as transcript:
            for line in transcript:
                entry = json.loads(line)
                content = entry.get("message", {}).get("content") if entry.get("type") == "user" else None
                if isinstance(content, str):
                    texts.append(content)
                elif isinstance(content, list):
                    texts += [block["text"] for block in content if block.get("type") == "text"]
        return texts

    def run(self) -> int:
        threading.Thread(target=self.read_stdin, daemon=True).start()
        failed = False
        while True:
            message = self.queued.pop(0) if self.queued else self.wait(None, in_turn=False)
            if message is None:
                return 1 if failed else 0
            failed = self.turn(message)


def _uid() -> str:
    return str(uuid.uuid4())


def main() -> None:
    steps = json.loads(os.environ.get("NODEPROV_FAKE_AGENT") or "[]")
    if not isinstance(steps, list) or not all(
        isinstance(step, dict) and len(step) == 1 and next(iter(step)) in STEPS for step in steps
    ):
        raise SystemExit(
            "NODEPROV_FAKE_AGENT must be a JSON list of one-key objects; keys: " + ", ".join(sorted(STEPS))
        )
    os._exit(_Agent(sys.argv[1:], steps).run())  # every write was flushed already


if __name__ == "__main__":
    main()

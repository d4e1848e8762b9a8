"""A fake ACP agent: a few lines of Python that speak the protocol, for the tests of the ACP
driver (tests/test_acp_session.py) and of ``nodeprov acp`` (tests/test_editor_acp.py)."""

__all__ = ["FAKE_ACP_AGENT"]

# Its sessions live in $HOME/sessions/ID.json (the prompts so far); a prompt's first word
# says what to do: "say WORDS" (in three chunks), "read PATH" (through the client's fs;
# "read-here PATH": PATH under its working directory), "write PATH WORDS", "tool KIND" (asks
# permission, runs or not), "caps" (says the client's capabilities), "image" (says the
# image's size and media type), "wait" (until cancelled), "exit" (dies), "flood N" (N
# chunks). "history" says the prompts of the session.
FAKE_ACP_AGENT = r"""
import json, os, sys
home = os.environ["HOME"]
asked, number, caps = {}, 100, {}
def send(message):
    sys.stdout.write(json.dumps(message) + "\n"); sys.stdout.flush()
def read():
    return json.loads(sys.stdin.readline() or "null")
def ask(method, params):
    global number
    number += 1
    send({"jsonrpc": "2.0", "id": number, "method": method, "params": params})
    while True:
        message = read()
        if message is None: sys.exit(0)
        if message.get("id") == number and "method" not in message: return message
def update(sid, what, **fields):
    params = {"sessionId": sid, "update": {"sessionUpdate": what, **fields}}
    send({"jsonrpc": "2.0", "method": "session/update", "params": params})
def chunk(sid, text, kind="agent_message_chunk"):
    update(sid, kind, content={"type": "text", "text": text})
def path(sid): return os.path.join(home, "sessions", sid + ".json")
def history(sid):
    try: return json.load(open(path(sid)))
    except FileNotFoundError: return None
def answer(message, result): send({"jsonrpc": "2.0", "id": message["id"], "result": result})
while True:
    message = read()
    if message is None: break
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        caps = params["clientCapabilities"]
        prompts = {"image": "image" in sys.argv}
        offered = {"loadSession": True, "promptCapabilities": prompts}
        answer(message, {"protocolVersion": 1, "agentCapabilities": offered, "authMethods": []})
    elif method == "session/new":
        sid = "fake-%d" % os.getpid()
        os.makedirs(os.path.dirname(path(sid)), exist_ok=True)
        json.dump([], open(path(sid), "w"))
        answer(message, {"sessionId": sid})
    elif method == "session/load":
        sid = params["sessionId"]
        if history(sid) is None:
            error = {"code": -32002, "message": "no session " + sid}
            send({"jsonrpc": "2.0", "id": message["id"], "error": error})
            continue
        late = "late-replay" in sys.argv  # the history after the answer, as the Gemini CLI does
        if late: answer(message, None)
        for said in history(sid): chunk(sid, said, "user_message_chunk"); chunk(sid, "(replayed) " + said)
        if not late: answer(message, None)
    elif method == "session/prompt":
        sid, blocks = params["sessionId"], params["prompt"]
        text = " ".join(b["text"] for b in blocks if b["type"] == "text")
        word, _, rest = text.partition(" ")
        if word.endswith("-here"): word, rest = word[:-5], os.path.join(os.getcwd(), rest)
        json.dump(history(sid) + [text], open(path(sid), "w"))
        stop = "end_turn"
        if word == "say":
            for piece in (rest[:3], rest[3:6], rest[6:]): chunk(sid, piece)
        elif word == "history":
            chunk(sid, " | ".join(history(sid)))
        elif word == "caps":
            chunk(sid, json.dumps(caps, sort_keys=True))
        elif word == "read":
            got = ask("fs/read_text_file", {"sessionId": sid, "path": rest})
            chunk(sid, got["result"]["content"] if "result" in got else "error: " + got["error"]["message"])
        elif word == "write":
            target, _, words = rest.partition(" ")
            got = ask("fs/write_text_file", {"sessionId": sid, "path": target, "content": words})
            chunk(sid, "written" if "result" in got else "error: " + got["error"]["message"])
        elif word == "tool":
            update(sid, "tool_call", toolCallId="c1", title="a " + rest, kind=rest, status="pending",
                   rawInput={"k": rest})
            options = [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                       {"optionId": "no", "name": "Reject", "kind": "reject_once"}]
            call = {"toolCallId": "c1", "kind": rest}
            got = ask("session/request_permission", {"sessionId": sid, "toolCall": call, "options": options})
            outcome = got["result"]["outcome"]
            ran = outcome.get("optionId") == "yes"
            update(sid, "tool_call_update", toolCallId="c1", status="completed" if ran else "failed",
                   content=[{"type": "content", "content": {"type": "text", "text": "ran" if ran else "no"}}])
        elif word == "image":
            image = next(b for b in blocks if b["type"] == "image")
            chunk(sid, "%s %d" % (image["mimeType"], len(image["data"])))
        elif word == "wait":
            chunk(sid, "waiting")
            update(sid, "plan", entries=[{"content": "wait", "status": "in_progress", "priority": "high"}])
            while (message_in := read()) is not None and message_in.get("method") != "session/cancel": pass
            stop = "cancelled"
        elif word == "exit":
            chunk(sid, "dying")
            sys.stderr.write("the fake agent dies\n"); sys.stderr.flush()
            sys.exit(3)
        elif word == "term":
            made = ask("terminal/create", {"sessionId": sid, "command": "/bin/sh", "outputByteLimit": 12,
                "args": ["-c", "echo $GREETING; echo to-stderr >&2; exit 4"],
                "env": [{"name": "GREETING", "value": "hello-from-a-terminal"}]})
            if "error" in made:
                chunk(sid, "error: " + made["error"]["message"])
            else:
                term = {"sessionId": sid, "terminalId": made["result"]["terminalId"]}
                status = ask("terminal/wait_for_exit", term)["result"]
                output = ask("terminal/output", term)["result"]
                ask("terminal/release", term)
                gone = ask("terminal/output", term)
                chunk(sid, json.dumps([status, output, "error" in gone]))
        elif word == "flood":
            for n in range(int(rest)): chunk(sid, "%d," % n)
        update(sid, "usage_update", used=10, size=1000)
        answer(message, {"stopReason": stop})
"""

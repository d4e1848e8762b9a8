/*
 * A compiled fake Claude Code CLI, for benchmarks only: never shipped, never run by nodeprov.
 *
 * It does what nodeprov/testing/fake_agent.py does for a script of "stream" steps, byte for
 * byte (but for uuids, times, durations and pids), at a fraction of its CPU: the Python fake
 * alone saturates a small machine at a hundred runs, which hides what the relay costs.
 *
 *   NODEPROV_FAKE_AGENT='[{"stream": [COUNT, BYTES, INTERVAL]}, ...]'  (stream steps only)
 *
 * Stream-json on stdin and stdout: it answers control requests (initialize with the Python
 * fake's fields, interrupt with still_queued, any other with an empty success); for each user
 * message it writes the transcript entry, session_state_changed running, system init, the
 * steps' assistant messages (text "t=EPOCH " padded with x to BYTES), the result, then
 * session_state_changed idle. Each assistant message and the user message go to the
 * transcript, $CLAUDE_CONFIG_DIR/projects/KEY/SESSION.jsonl (KEY: the working directory with
 * every byte but letters and digits replaced by '-'), and with --session-mirror out as a
 * transcript_mirror frame. --session-id ID or --resume ID (unless --fork-session) names the
 * session. An interrupt ends a turn at the next message as the real CLI does. Stdin EOF does
 * not end a turn; after the last it exits 1 if that turn was interrupted, else 0.
 *
 * Bench only: with NODEPROV_FAKE_AGENT_CPU_FILE set, it appends "USER_US SYSTEM_US\n" (its
 * own CPU time since main() began, in microseconds) to that file when it exits, SIGTERM
 * included, so that a benchmark can tell the agents' CPU from that of the processes around
 * them (a shell that execs the agent spent its CPU in the same process).
 *
 * Build: cc -O2 -o fake-agent fake_agent.c (bench/compiled_agent.py does it on demand).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MODEL "fake-model"
#define USAGE                                                                                 \
  "{\"input_tokens\":10,\"output_tokens\":5,\"cache_creation_input_tokens\":0,"               \
  "\"cache_read_input_tokens\":0}"

/* ---------------------------------------------------------------- growable byte buffers */

typedef struct {
  char *data;
  size_t len, cap;
} Buf;

static void reserve(Buf *b, size_t n) { /* room for n more bytes and a NUL */
  if (b->len + n + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + n + 1) cap *= 2;
  char *data = realloc(b->data, cap);
  if (!data) {
    perror("fake-agent");
    _exit(70);
  }
  b->data = data;
  b->cap = cap;
}

static void put(Buf *b, const char *s, size_t n) {
  reserve(b, n);
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

static void puts_(Buf *b, const char *s) { put(b, s, strlen(s)); }

static void putf(Buf *b, const char *format, ...) {
  va_list args;
  va_start(args, format);
  int n = vsnprintf(NULL, 0, format, args);
  va_end(args);
  if (n <= 0) return;
  reserve(b, (size_t)n);
  va_start(args, format);
  vsnprintf(b->data + b->len, (size_t)n + 1, format, args);
  va_end(args);
  b->len += (size_t)n;
}

/* The length of the valid UTF-8 sequence at p (not overlong, not a surrogate), else 0. */
static size_t utf8_length(const unsigned char *p, const unsigned char *end) {
  unsigned c = *p;
  if (c < 0x80) return 1;
  if (c < 0xc2 || c > 0xf4) return 0;
  size_t length = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
  unsigned low = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
  unsigned high = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
  for (size_t i = 1; i < length; i++) {
    unsigned next = p + i < end ? p[i] : 0;
    if (next < (i == 1 ? low : 0x80) || next > (i == 1 ? high : 0xbf)) return 0;
  }
  return length;
}

/* Writes the character at p as json.dumps escapes it (ensure_ascii): a \uXXXX escape for
 * what is not printable ASCII, and a lone surrogate (\udcXX) for a byte that is not valid
 * UTF-8, as Python decodes it from argv, the environment or the file system. Returns the
 * number of bytes it took. */
static size_t put_escaped(Buf *b, const unsigned char *p, const unsigned char *end) {
  static const char hex[] = "0123456789abcdef";
  unsigned c = *p;
  if (c == '"' || c == '\\') {
    char pair[2] = {'\\', (char)c};
    put(b, pair, 2);
    return 1;
  }
  const char *named = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t"
                    : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
  if (named) {
    puts_(b, named);
    return 1;
  }
  size_t length = utf8_length(p, end);
  uint32_t code = c < 0x80 ? c : 0xdc00 | c; /* a byte that starts no valid sequence: surrogateescape's */
  if (length > 1) {
    code = c & (length == 2 ? 0x1f : length == 3 ? 0x0f : 0x07);
    for (size_t i = 1; i < length; i++) code = (code << 6) | (p[i] & 0x3f);
  } else {
    length = 1;
  }
  uint32_t units[2] = {code, 0};
  if (code >= 0x10000) {
    code -= 0x10000;
    units[0] = 0xd800 | (code >> 10);
    units[1] = 0xdc00 | (code & 0x3ff);
  }
  for (int i = 0; i < 2 && units[i]; i++) {
    char escape[6] = {'\\', 'u', hex[units[i] >> 12], hex[(units[i] >> 8) & 15], hex[(units[i] >> 4) & 15],
                      hex[units[i] & 15]};
    put(b, escape, sizeof escape);
  }
  return length;
}

static bool printable(unsigned char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; }

/* A JSON string as Python's json.dumps writes it (see put_escaped). */
static void put_json_string(Buf *b, const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s, *end = p + n;
  put(b, "\"", 1);
  while (p < end) {
    const unsigned char *run = p;
    while (p < end && printable(*p)) p++;
    if (p > run) put(b, (const char *)run, (size_t)(p - run));
    if (p < end) p += put_escaped(b, p, end);
  }
  put(b, "\"", 1);
}

static void put_json_cstring(Buf *b, const char *s) { put_json_string(b, s, strlen(s)); }

/* --------------------------------------------------- reading the JSON that comes on stdin */

typedef struct {
  const char *start, *end;
} Span;

static const char *skip_space(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

/* The end of the JSON value at p, or NULL if there is none. Lenient: it finds the end of a
 * well-formed value, and the caller does not need to know more of a malformed line. */
static const char *skip_value(const char *p, const char *end) {
  p = skip_space(p, end);
  if (p >= end) return NULL;
  if (*p == '"') {
    for (p++; p < end; p++) {
      if (*p == '\\') p++;
      else if (*p == '"') return p + 1;
    }
    return NULL;
  }
  if (*p == '{' || *p == '[') {
    char close = *p == '{' ? '}' : ']';
    p = skip_space(p + 1, end);
    if (p < end && *p == close) return p + 1;
    while (p < end) {
      if (close == '}') {
        p = skip_value(p, end); /* the key */
        p = p ? skip_space(p, end) : NULL;
        if (!p || p >= end || *p != ':') return NULL;
        p++;
      }
      p = skip_value(p, end);
      p = p ? skip_space(p, end) : NULL;
      if (!p || p >= end) return NULL;
      if (*p == close) return p + 1;
      if (*p != ',') return NULL;
      p++;
    }
    return NULL;
  }
  while (p < end && !strchr(",]} \t\r\n", *p)) p++; /* a number, true, false or null */
  return p;
}

/* The value of `key` in the object at obj (keys compared as written: ours need no escapes). */
static bool find_key(Span obj, const char *key, Span *value) {
  const char *p = skip_space(obj.start, obj.end), *end = obj.end;
  size_t key_length = strlen(key);
  if (p >= end || *p != '{') return false;
  p = skip_space(p + 1, end);
  while (p < end && *p == '"') {
    const char *name = p + 1, *after = skip_value(p, end);
    if (!after) return false;
    bool wanted = (size_t)(after - 1 - name) == key_length && !memcmp(name, key, key_length);
    p = skip_space(after, end);
    if (p >= end || *p != ':') return false;
    const char *start = skip_space(p + 1, end), *stop = skip_value(start, end);
    if (!stop) return false;
    if (wanted) {
      *value = (Span){start, stop};
      return true;
    }
    p = skip_space(stop, end);
    if (p >= end || *p != ',') return false;
    p = skip_space(p + 1, end);
  }
  return false;
}

static bool span_is(Span span, const char *text) {
  size_t n = strlen(text);
  return (size_t)(span.end - span.start) == n && !memcmp(span.start, text, n);
}

/* JSON in its compact form (Python's separators=(",", ":")), as json.dumps would write it
 * again: without whitespace between tokens, and strings in ASCII. (Python would also undo
 * escapes it never writes itself, such as \/: the SDK never sends those.) */
static void put_compact(Buf *b, Span span) {
  bool in_string = false;
  const unsigned char *p = (const unsigned char *)span.start, *end = (const unsigned char *)span.end;
  while (p < end) {
    unsigned char c = *p;
    if (in_string && c >= 0x80) {
      p += put_escaped(b, p, end);
      continue;
    }
    if (in_string && c == '\\' && p + 1 < end) {
      put(b, (const char *)p, 2);
      p += 2;
      continue;
    }
    if (in_string) in_string = c != '"';
    else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') c = 0;
    else in_string = c == '"';
    if (c) put(b, (const char *)&c, 1);
    p++;
  }
}

/* Compact JSON in json.dumps's default form: a space after every ',' and ':' between tokens. */
static void put_spaced(Buf *b, const char *json, size_t n) {
  bool in_string = false;
  const char *run = json;
  for (const char *p = json; p < json + n; p++) {
    if (in_string) {
      if (*p == '\\') p++;
      else if (*p == '"') in_string = false;
    } else if (*p == '"') {
      in_string = true;
    } else if (*p == ',' || *p == ':') {
      put(b, run, (size_t)(p + 1 - run));
      put(b, " ", 1);
      run = p + 1;
    }
  }
  put(b, run, (size_t)(json + n - run));
}

/* ----------------------------------------------------------------------------- the agent */

typedef struct {
  long count, size;
  double interval;
} Stream;

typedef struct {
  Buf *items;
  size_t len, cap;
} Queue;

static struct {
  Stream *steps;
  size_t step_count;
  const char *session_id, *permission_mode;
  bool mirror, eof;
  char cwd[PATH_MAX];
  Buf transcript; /* its path */
  int transcript_fd;
  char last_entry[37]; /* empty: none yet */
  long turns;
  Buf input;      /* stdin read but not handled yet */
  size_t handled; /* how much of input is handled */
  Queue queued;   /* user messages that came during a turn, for the turns after it */
  const char *cpu_file;
  struct rusage cpu_at_start;
} agent = {.transcript_fd = -1};

enum { NOTHING, USER_MESSAGE, INTERRUPTED };

static void write_all(int fd, const char *data, size_t n) {
  while (n) {
    ssize_t written = write(fd, data, n);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return; /* the reader went away: the Python fake goes on too */
    data += written;
    n -= (size_t)written;
  }
}

static void emit(Buf *line) { /* a compact message, written as json.dumps writes it */
  Buf out = {0};
  put_spaced(&out, line->data, line->len);
  put(&out, "\n", 1);
  write_all(1, out.data, out.len);
  free(out.data);
}

static void uuid4(char out[37]) {
  static unsigned char pool[4096];
  static size_t left = 0;
  static const char hex[] = "0123456789abcdef";
  if (left < 16) {
    size_t got = 0;
    while (got < sizeof pool) {
      ssize_t n = getrandom(pool + got, sizeof pool - got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        perror("fake-agent: getrandom");
        _exit(70);
      }
      got += (size_t)n;
    }
    left = sizeof pool;
  }
  unsigned char *bytes = pool + sizeof pool - left;
  left -= 16;
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  char *q = out;
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) *q++ = '-';
    *q++ = hex[bytes[i] >> 4];
    *q++ = hex[bytes[i] & 15];
  }
  *q = '\0';
}

static double monotonic_now(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

static double wall_now(void) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

static void make_parents(const char *path) { /* os.makedirs(os.path.dirname(path), exist_ok=True) */
  char *directory = strdup(path);
  for (char *p = directory ? directory + 1 : ""; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(directory, 0777);
    *p = '/';
  }
  free(directory);
}

/* Appends a transcript entry; adds its mirror frame to `frame` when mirroring and written. */
static void record(const char *kind, const char *message, size_t message_length, const char *uuid,
                   Buf *frame) {
  Buf entry = {0};
  char stamp[32];
  time_t now = time(NULL);
  struct tm utc;
  gmtime_r(&now, &utc);
  strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S.000Z", &utc);
  putf(&entry, "{\"type\":\"%s\",\"uuid\":\"%s\",\"parentUuid\":", kind, uuid);
  if (agent.last_entry[0]) putf(&entry, "\"%s\"", agent.last_entry);
  else puts_(&entry, "null");
  puts_(&entry, ",\"sessionId\":");
  put_json_cstring(&entry, agent.session_id);
  putf(&entry, ",\"timestamp\":\"%s\",\"cwd\":", stamp);
  put_json_cstring(&entry, agent.cwd);
  puts_(&entry, ",\"message\":");
  put(&entry, message, message_length);
  puts_(&entry, "}");
  snprintf(agent.last_entry, sizeof agent.last_entry, "%s", uuid);
  if (agent.transcript_fd < 0) {
    make_parents(agent.transcript.data);
    agent.transcript_fd = open(agent.transcript.data, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  }
  if (agent.transcript_fd >= 0) { /* a config directory it cannot write: it goes on without one */
    put(&entry, "\n", 1);
    ssize_t written = write(agent.transcript_fd, entry.data, entry.len);
    if (written >= 0 && agent.mirror) {
      puts_(frame, "{\"type\": \"transcript_mirror\", \"filePath\": ");
      put_json_cstring(frame, agent.transcript.data);
      puts_(frame, ", \"entries\": [");
      put_spaced(frame, entry.data, entry.len - 1);
      puts_(frame, "]}\n");
    }
  }
  free(entry.data);
}

static void system_message(const char *subtype, const char *fields) {
  char id[37];
  Buf line = {0};
  uuid4(id);
  putf(&line, "{\"type\":\"system\",\"subtype\":\"%s\",", subtype);
  puts_(&line, fields);
  puts_(&line, ",\"session_id\":");
  put_json_cstring(&line, agent.session_id);
  putf(&line, ",\"uuid\":\"%s\"}", id);
  emit(&line);
  free(line.data);
}

static void control(Span message, bool *interrupted, bool in_turn) {
  Span request, subtype = {"", ""}, request_id;
  if (find_key(message, "request", &request)) find_key(request, "subtype", &subtype);
  Buf line = {0};
  puts_(&line, "{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":");
  if (find_key(message, "request_id", &request_id)) put_compact(&line, request_id);
  else puts_(&line, "null");
  puts_(&line, ",\"response\":");
  if (span_is(subtype, "\"initialize\""))
    putf(&line, "{\"commands\":[],\"agents\":[],\"models\":[],\"output_style\":\"default\",\"pid\":%ld}",
         (long)getpid());
  else if (span_is(subtype, "\"interrupt\""))
    puts_(&line, "{\"still_queued\":[]}");
  else
    puts_(&line, "{}");
  puts_(&line, "}}");
  emit(&line);
  free(line.data);
  *interrupted = in_turn && span_is(subtype, "\"interrupt\"");
}

/* Handles the complete lines read so far. Outside a turn it stops at a user message and copies
 * it to `user`; in a turn it queues user messages, and stops at an interrupt. */
static int handle_lines(bool in_turn, Buf *user) {
  while (agent.handled < agent.input.len) {
    char *start = agent.input.data + agent.handled;
    char *newline = memchr(start, '\n', agent.input.len - agent.handled);
    if (!newline) return NOTHING;
    agent.handled = (size_t)(newline + 1 - agent.input.data);
    Span line = {start, newline}, type;
    const char *after = skip_value(start, newline); /* not JSON, or not an object: skipped */
    if (!after || skip_space(after, newline) != newline || !find_key(line, "type", &type)) continue;
    if (span_is(type, "\"user\"")) {
      Buf *into = user;
      if (in_turn) {
        if (agent.queued.len == agent.queued.cap) {
          agent.queued.cap = agent.queued.cap ? agent.queued.cap * 2 : 4;
          agent.queued.items = realloc(agent.queued.items, agent.queued.cap * sizeof(Buf));
          if (!agent.queued.items) _exit(70);
        }
        into = &agent.queued.items[agent.queued.len++];
        *into = (Buf){0};
      }
      into->len = 0;
      put(into, line.start, (size_t)(line.end - line.start));
      if (!in_turn) return USER_MESSAGE;
    } else if (span_is(type, "\"control_request\"")) {
      bool interrupted;
      control(line, &interrupted, in_turn);
      if (interrupted) return INTERRUPTED;
    }
  }
  return NOTHING;
}

/* Handles what came on stdin; with `block` (outside a turn), waits for a user message or EOF. */
static int serve_input(bool block, bool in_turn, Buf *user) {
  for (;;) {
    int handled = handle_lines(in_turn, user);
    if (handled != NOTHING) return handled;
    if (agent.handled) { /* keep only the line under way */
      memmove(agent.input.data, agent.input.data + agent.handled, agent.input.len - agent.handled);
      agent.input.len -= agent.handled;
      agent.handled = 0;
    }
    if (agent.eof) return NOTHING;
    struct pollfd stdin_poll = {.fd = 0, .events = POLLIN};
    int ready = poll(&stdin_poll, 1, block ? -1 : 0);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return NOTHING;
    char chunk[65536];
    ssize_t n = read(0, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) { /* EOF: a last line without its newline still counts, as in Python */
      agent.eof = true;
      if (agent.input.len > agent.handled) put(&agent.input, "\n", 1);
      continue;
    }
    put(&agent.input, chunk, (size_t)n);
  }
}

static void assistant(const char *text, size_t text_length) {
  char message_id[37], id[37];
  Buf message = {0}, line = {0}, frame = {0};
  uuid4(message_id);
  putf(&message, "{\"id\":\"msg_%s\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"" MODEL
                 "\",\"content\":[{\"type\":\"text\",\"text\":", message_id);
  put_json_string(&message, text, text_length);
  puts_(&message, "}],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":" USAGE "}");
  uuid4(id);
  record("assistant", message.data, message.len, id, &frame);
  puts_(&line, "{\"type\":\"assistant\",\"message\":");
  put(&line, message.data, message.len);
  puts_(&line, ",\"parent_tool_use_id\":null,\"session_id\":");
  put_json_cstring(&line, agent.session_id);
  putf(&line, ",\"uuid\":\"%s\"}", id);
  Buf out = {0}; /* the message and its frame in one write, as the Python fake does */
  put_spaced(&out, line.data, line.len);
  put(&out, "\n", 1);
  put(&out, frame.data ? frame.data : "", frame.len);
  write_all(1, out.data, out.len);
  free(message.data);
  free(line.data);
  free(frame.data);
  free(out.data);
}

static void result(double started, bool interrupted, const char *said, size_t said_length) {
  char id[37];
  Buf line = {0};
  long duration = (long)((monotonic_now() - started) * 1000);
  uuid4(id);
  putf(&line, "{\"type\":\"result\",\"subtype\":\"%s\",\"is_error\":%s,",
       interrupted ? "error_during_execution" : "success", interrupted ? "true" : "false");
  putf(&line, "\"duration_ms\":%ld,\"duration_api_ms\":%ld,\"num_turns\":%ld,\"session_id\":", duration,
       duration, agent.turns);
  put_json_cstring(&line, agent.session_id);
  putf(&line, ",\"stop_reason\":%s,\"total_cost_usd\":0.0001,\"usage\":" USAGE ",", interrupted ? "null" : "\"end_turn\"");
  puts_(&line, "\"modelUsage\":{\"" MODEL "\":{\"inputTokens\":10,\"outputTokens\":5,\"costUSD\":0.0001}},");
  putf(&line, "\"permission_denials\":[],\"terminal_reason\":\"%s\",\"uuid\":\"%s\",",
       interrupted ? "aborted_streaming" : "completed", id);
  if (interrupted) {
    puts_(&line, "\"errors\":[\"[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null\"]}");
  } else {
    puts_(&line, "\"result\":");
    put_json_string(&line, said, said_length);
    puts_(&line, "}");
  }
  emit(&line);
  free(line.data);
  system_message("session_state_changed", "\"state\":\"idle\",\"sdk_host_only\":true");
}

static void sleep_seconds(double seconds) {
  if (seconds <= 0) return;
  struct timespec rest = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&rest, &rest) < 0 && errno == EINTR) {
  }
}

/* Runs the steps for one user message; returns whether its result is an error. */
static bool turn(Buf *prompt) {
  double started = monotonic_now();
  Buf said = {0}, frame = {0}, fields = {0}, message = {0};
  char id[37];
  agent.turns++;
  Span line = {prompt->data, prompt->data + prompt->len}, content;
  /* prompt.get("message") or {}: a missing or null message is an empty one */
  static const char *const falsy[] = {"null", "false", "0", "\"\"", "[]"};
  bool given = find_key(line, "message", &content);
  for (size_t i = 0; given && i < sizeof falsy / sizeof *falsy; i++) given = !span_is(content, falsy[i]);
  if (given) put_compact(&message, content);
  else puts_(&message, "{}");
  uuid4(id);
  record("user", message.data, message.len, id, &frame);
  if (frame.len) write_all(1, frame.data, frame.len);
  system_message("session_state_changed", "\"state\":\"running\",\"sdk_host_only\":true");
  puts_(&fields, "\"cwd\":");
  put_json_cstring(&fields, agent.cwd);
  puts_(&fields, ",\"tools\":[],\"mcp_servers\":[],\"model\":\"" MODEL "\",\"permissionMode\":");
  put_json_cstring(&fields, agent.permission_mode);
  system_message("init", fields.data);
  bool interrupted = false;
  for (size_t step = 0; step < agent.step_count && !interrupted; step++) {
    Stream stream = agent.steps[step];
    interrupted = serve_input(false, true, NULL) == INTERRUPTED; /* an interrupt that came meanwhile */
    for (long index = 0; index < stream.count && !interrupted; index++) {
      if (index) { /* a plain sleep, then what came meanwhile, as the Python fake does */
        sleep_seconds(stream.interval);
        if (serve_input(false, true, NULL) == INTERRUPTED) {
          interrupted = true;
          break;
        }
      }
      said.len = 0;
      putf(&said, "t=%.6f ", wall_now());
      while ((long)said.len < stream.size) put(&said, "x", 1);
      assistant(said.data, said.len);
    }
  }
  if (interrupted) {
    Buf user = {0};
    uuid4(id);
    puts_(&user, "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                 "\"text\":\"[Request interrupted by user]\"}]},\"parent_tool_use_id\":null,\"session_id\":");
    put_json_cstring(&user, agent.session_id);
    putf(&user, ",\"uuid\":\"%s\"}", id);
    emit(&user);
    free(user.data);
  }
  result(started, interrupted, said.data ? said.data : "", said.len);
  free(said.data);
  free(frame.data);
  free(fields.data);
  free(message.data);
  return interrupted;
}

/* ------------------------------------------------------------------- set-up and exit */

static long long microseconds(struct timeval time) { return (long long)time.tv_sec * 1000000 + time.tv_usec; }

/* Its CPU since main() began: a process execs into the agent (a shell, a supervisor's fork),
 * and what it did before is theirs. Async-signal-safe: it also runs in the SIGTERM handler. */
static void report_cpu(void) {
  if (!agent.cpu_file) return;
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  long long values[2] = {microseconds(usage.ru_utime) - microseconds(agent.cpu_at_start.ru_utime),
                         microseconds(usage.ru_stime) - microseconds(agent.cpu_at_start.ru_stime)};
  char text[64], *q = text + sizeof text;
  *--q = '\n';
  for (int i = 1; i >= 0; i--) {
    long long value = values[i];
    do *--q = (char)('0' + value % 10);
    while ((value /= 10) > 0);
    if (i) *--q = ' ';
  }
  int fd = open(agent.cpu_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd >= 0) {
    write_all(fd, q, (size_t)(text + sizeof text - q));
    close(fd);
  }
}

static void on_term(int sig) {
  report_cpu();
  signal(sig, SIG_DFL);
  raise(sig);
}

static _Noreturn void quit(int status) {
  report_cpu();
  _exit(status);
}

static const char *flag(int argc, char **argv, const char *name) { /* "--name value" or "--name=value" */
  size_t n = strlen(name);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], name) && i + 1 < argc) return argv[i + 1];
    if (!strncmp(argv[i], name, n) && argv[i][n] == '=') return argv[i] + n + 1;
  }
  return NULL;
}

static bool has_arg(int argc, char **argv, const char *name) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], name)) return true;
  return false;
}

static _Noreturn void bad_script(void) {
  fputs("NODEPROV_FAKE_AGENT must be a JSON list of stream steps for the compiled fake agent: "
        "[{\"stream\": [count, size, interval]}, ...]\n", stderr);
  _exit(1);
}

static const char *expect(const char *p, char c) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  if (*p != c) bad_script();
  return p + 1;
}

static const char *number(const char *p, double *value) {
  char *end;
  *value = strtod(p, &end);
  if (end == p) bad_script();
  return end;
}

static void parse_script(const char *script) { /* just the shape [{"stream": [N, N, N]}, ...] */
  const char *p = expect(script && *script ? script : "[]", '[');
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  for (; *p != ']';) {
    double count, size, interval;
    p = expect(p, '{');
    p = expect(p, '"');
    if (strncmp(p, "stream\"", 7)) bad_script();
    p = expect(expect(p + 7, ':'), '[');
    p = expect(number(p, &count), ',');
    p = expect(number(p, &size), ',');
    p = expect(expect(number(p, &interval), ']'), '}');
    agent.steps = realloc(agent.steps, (agent.step_count + 1) * sizeof(Stream));
    if (!agent.steps) _exit(70);
    agent.steps[agent.step_count++] = (Stream){(long)count, (long)size, interval};
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p != ']') p = expect(p, ',');
  }
  for (p++; *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'; p++) {
  }
  if (*p) bad_script();
}

int main(int argc, char **argv) {
  getrusage(RUSAGE_SELF, &agent.cpu_at_start);
  signal(SIGPIPE, SIG_IGN); /* a reader gone is a failed write, as in Python */
  parse_script(getenv("NODEPROV_FAKE_AGENT"));
  agent.cpu_file = getenv("NODEPROV_FAKE_AGENT_CPU_FILE");
  if (agent.cpu_file && *agent.cpu_file) signal(SIGTERM, on_term);
  else agent.cpu_file = NULL;

  static char fresh[37];
  const char *resumed = has_arg(argc, argv, "--fork-session") ? NULL : flag(argc, argv, "--resume");
  agent.session_id = flag(argc, argv, "--session-id");
  if (!agent.session_id || !*agent.session_id) agent.session_id = resumed;
  if (!agent.session_id || !*agent.session_id) {
    uuid4(fresh);
    agent.session_id = fresh;
  }
  agent.permission_mode = flag(argc, argv, "--permission-mode");
  if (!agent.permission_mode || !*agent.permission_mode) agent.permission_mode = "default";
  agent.mirror = has_arg(argc, argv, "--session-mirror");
  if (!getcwd(agent.cwd, sizeof agent.cwd)) {
    perror("fake-agent: getcwd");
    return 1;
  }

  char config[PATH_MAX];
  const char *configured = getenv("CLAUDE_CONFIG_DIR");
  if (configured && *configured) {
    snprintf(config, sizeof config, "%s", configured);
  } else { /* os.path.expanduser("~/.claude") */
    const char *home = getenv("HOME");
    struct passwd *user = home ? NULL : getpwuid(getuid());
    home = home ? home : user ? user->pw_dir : "";
    size_t n = strlen(home);
    while (n > 0 && home[n - 1] == '/') n--;
    snprintf(config, sizeof config, "%.*s/.claude", (int)n, home);
  }
  char project[PATH_MAX]; /* the CLI's key for paths under 200 characters */
  size_t kept = 0; /* one '-' a character, as Python counts them (a byte not UTF-8 is one) */
  const unsigned char *cwd = (const unsigned char *)agent.cwd, *cwd_end = cwd + strlen(agent.cwd);
  while (cwd < cwd_end) {
    unsigned char c = *cwd;
    bool alphanumeric = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    project[kept++] = alphanumeric ? (char)c : '-';
    size_t length = utf8_length(cwd, cwd_end);
    cwd += length ? length : 1;
  }
  project[kept] = '\0';
  size_t config_length = strlen(config);
  const char *slash = config_length && config[config_length - 1] == '/' ? "" : "/";
  puts_(&agent.transcript, config);
  puts_(&agent.transcript, slash);
  puts_(&agent.transcript, "projects/");
  puts_(&agent.transcript, project);
  puts_(&agent.transcript, "/");
  puts_(&agent.transcript, agent.session_id);
  puts_(&agent.transcript, ".jsonl");

  bool failed = false;
  for (;;) {
    Buf message = {0};
    if (agent.queued.len) {
      message = agent.queued.items[0];
      memmove(agent.queued.items, agent.queued.items + 1, --agent.queued.len * sizeof(Buf));
    } else if (serve_input(true, false, &message) != USER_MESSAGE) {
      quit(failed ? 1 : 0);
    }
    failed = turn(&message);
    free(message.data);
  }
}

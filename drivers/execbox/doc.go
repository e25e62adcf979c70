// Package execbox is the driver that runs guest JavaScript on execbox
// runners, with the gateway as the trusted host: the runner executes the
// code, and every tool the code calls is called by the gateway, through
// [drivers.Call.Tools], under its own policy decision and evidence.
//
// # Transports
//
// The execbox protocol defines messages, not a transport. A Driver speaks
// it over one of two, chosen by Config:
//
//   - WebSocket (Config.URL, ws:// or wss://): one connection per
//     execution, one JSON text frame per message. Redirects are not
//     followed. Engine "execbox-ws".
//   - stdio (Config.Command): one runner process per execution, one JSON
//     object per line on its stdin and stdout; blank lines are skipped.
//     Engine "execbox-stdio".
//
// A runner process starts in its own process group with an environment
// holding only PATH, HOME, TMPDIR and LANG from the gateway's (the gateway's
// environment holds the secrets it resolves for tools). When the session
// ends, however it ends, the whole group is killed with SIGKILL and the
// runner reaped; on Linux the kernel also kills it should the gateway die
// first. The last 16 KiB of its stderr are kept for diagnostics: logged at
// warning level when the process failed on its own, at debug level
// otherwise, and never part of a Result.
//
// Runners take 0.5–1.5 s to start. With Config.Pool set, that many runner
// processes are started ahead of calls and each call takes the oldest; the
// pool refills in the background. A process is used for one session only. A
// process whose stdout ends while it waits has died: it is reaped and
// replaced, never handed out. A runner has nothing to say before execute,
// so anything it writes meanwhile is logged and dropped. Failed starts and
// deaths in the pool back off from 100 ms up to 5 s, so a broken command
// does not become a fork loop. Close kills the waiting processes.
//
// # Sealed
//
// The driver is [drivers.Sealed]: guest code has no way out of the runner
// but the tool calls the host answers, so a run whose nested calls were
// none of them dispatched had no effect. The gateway relies on that to
// discard such a run when a guest's call waits for a human's approval, and
// to run the guest again once it is approved. A runner that gives guest
// code network access, files or secrets of its own breaks the promise.
//
// # Arguments
//
// A catalog tool bound to this driver takes these arguments; any other
// argument name is refused:
//
//   - code (string, required): the guest program, at most 1 MiB of UTF-8.
//   - providers (list of strings, optional): the provider namespaces to
//     offer, by guest name or by the namespace as written in tool ids.
//     Absent or null offers all; an empty list offers none; an unknown name
//     is refused.
//   - timeoutMs (whole number, optional): the execution's time limit, from
//     1 to Config.Timeout. It can lower the limit, never raise it.
//
// Refused arguments are a Result with exit code 2 and Stderr
// "validation_error: <what is wrong>"; no runner is contacted.
//
// # Providers
//
// The tools offered are call.Tools.Tools(). A tool id's namespace is the
// part before the first '.' ("tools" when there is none, or when it is
// empty), its name the rest. Both are made JavaScript identifiers that are
// also valid in a TypeScript declaration: every character outside
// [A-Za-z0-9_] becomes '_', a leading digit gets a '_' in front, and a
// reserved word, a global the guest relies on (console, JSON, Promise, …)
// as a namespace, or a property every object has (constructor, __proto__,
// …) as a tool name gets a '_' appended. Tools are named in id order; a name
// already taken gets the first free suffix "_2", "_3", …, so the mapping
// depends only on the set of ids and never gives two tools one name:
//
//	github.issues.list  →  github.issues_list
//	scrape-url          →  tools.scrape_url
//	my-ns.a, my_ns.b    →  my_ns.a, my_ns_2.b
//	a.x-y, a.x_y        →  a.x_y, a.x_y_2
//	console.log         →  console_.log
//
// Each provider is sent as a manifest {name, tools: {safeName: {safeName,
// originalName: the tool id, description}}, types}, where types is a
// declaration such as
//
//	declare namespace github {
//	  /** github.issues.list: List issues */
//	  function issues_list(input?: unknown): Promise<unknown>;
//	}
//
// # Session
//
// The host sends execute {type, id, code, options, providers}. The id is
// the call's request id, or a random "exec-…" id when there is none (or it
// is longer than 128 bytes). options always carries timeoutMs,
// memoryLimitBytes, maxLogLines and maxLogChars (defaults 30 s, 64 MiB, 1000
// lines, 64000 characters; set by Config): a real runner given an execute
// without options never answers. Exactly one execute is sent per session.
//
// The runner answers started (optional), any number of tool_call, and done.
// Messages whose id names another execution are ignored, as is a done that
// rejects a second execute (it carries the second execute's id). Messages
// that are not JSON objects with a string type, tool_calls without a usable
// callId (a string of 1 to 256 bytes), messages of unknown types and
// anything after the first done are ignored too; each is logged and
// counted. A message larger than Config.MaxMessageBytes ends the session
// with serialization_error (see Results).
//
// # Tool calls
//
// A tool_call names a provider and a tool; the host maps the pair back to
// the tool id and calls call.Tools.CallTool with the callId and the input
// (nil when the runner sent none: a guest call without an argument has no
// "input" field). Up to Config.MaxNestedInFlight calls (default 8) run at
// once, so the guest's parallel calls run in parallel; the others wait
// their turn. Writes to the transport are serialized. A callId is served
// once; a repeated one is ignored and logged.
//
// One execution may make Config.MaxNestedCalls tool calls (default 256).
// Every call beyond it is answered at once with tool_error, "tool call
// refused: this execution reached its limit of N nested tool calls
// (max_nested_calls)", and never reaches call.Tools: no policy decision,
// no evidence of its own. The evidence counts the refusals. While more
// than a few refusals wait to be written, the host stops reading from the
// runner, so a guest flooding calls faster than it reads their answers
// costs the host no more memory.
//
// The answer is a tool_result {type, callId, ok, result} or {type, callId,
// ok: false, error: {code, message}}. A successful result of nil is sent as
// "result": null, never omitted: a real runner drops a tool_result without
// result and then hangs. Failure codes are forced into the seven protocol
// codes (timeout, memory_limit, validation_error, tool_error, runtime_error,
// serialization_error, internal_error); any other code becomes
// internal_error, because a real runner turns unknown codes into
// runtime_error and the guest could not tell them apart. The host itself
// answers internal_error for a tool it does not offer (an unknown name, or
// a provider left out by the providers argument), serialization_error for
// an input that is not plain JSON or a result that cannot be encoded or
// exceeds Config.MaxMessageBytes, and timeout for any call once it has
// cancelled the execution.
//
// A tool that ran and failed is answered ok: false with the code the
// gateway chose (tool_error; validation_error when the tool refused its
// input) and the tool's result {exit_code, stdout, stderr, data}, the same
// shape a successful call resolves to: as error.result, and at the end of
// error.message after "\ntool result: " when the message stays within
// 8 KiB, because a runner may hand the guest only the code and the message.
// A result that would take the answer over Config.MaxMessageBytes is left
// out, and the message says so.
//
// # Untrusted values
//
// Inputs and results cross through the guest's own JSON.stringify, which
// guest code can override, so the host trusts none of them. A value is
// plain JSON when it nests at most 64 levels deep and each of its numbers
// is finite as a float64; numbers are kept as [encoding/json.Number] so that
// no digit is lost. Error messages from the runner or a tool are made valid
// UTF-8, stripped of control characters but line breaks and tabs, and cut
// at 8 KiB.
//
// # Results
//
// A done becomes a [drivers.Result]. Stdout holds the guest's console
// lines, each followed by a line break, limited again on the host side by
// maxLogLines and then maxLogChars (counted in characters, the last line
// clipped); a log entry that is not a string is kept as its JSON text. On
// success Data is the guest's result (nil for undefined or null) and Stderr
// is empty. On failure Data is nil, Stderr is "code: message", and the exit
// code follows the code:
//
//	exit  code                 cause
//	0     —                    done with ok: true
//	1     runtime_error        an uncaught guest error; also out of memory,
//	                           which real runners report as runtime_error
//	                           "out of memory"
//	2     validation_error     arguments refused by this driver; input
//	                           refused by a tool
//	3     tool_error           an uncaught tool failure, such as a nested
//	                           call denied by policy
//	4     serialization_error  a value that cannot cross the boundary; a
//	                           result that is not plain JSON; a runner
//	                           message over Config.MaxMessageBytes (a
//	                           guest result or logs too large)
//	5     internal_error       a runner failure; a done with an unknown
//	                           code (quoted in the message), without a
//	                           boolean ok or without an error
//	124   timeout              the runner's own limit; the host's limit
//	137   memory_limit         the runner's memory limit
//
// Run returns a Go error (which the gateway reports as UNAVAILABLE) only
// when the runner could not be reached (connection refused, handshake
// refused, process not started), when the transport broke before done
// (closed connection, runner process exit or crash; a runner process's
// exit status is part of the error), or when ctx was cancelled rather than
// timed out. Once a session is open, that error is a
// [drivers.EvidenceError] carrying the evidence below (nested_calls
// included) with ended_without_done set, so that the tool calls guest code
// made before the break stay on record.
//
// An error is marked [drivers.ErrNotDispatched] when it proves that the
// execute message never reached a runner, so that a retry with the same
// request id may run the call: the driver was closed; ctx had ended before
// a session was opened (such a call is never started, so it is never
// reported as timed out); the WebSocket runner could not be reached
// (connection refused, a name that did not resolve, a TLS failure or an
// untrusted certificate, a handshake answered with anything but a session,
// no session within the execution's time limit); the runner process could
// not be started; or the write of execute put not a single byte into the
// pipe of a runner process that had already closed its stdin or exited,
// and no tool was called. The message says so, for example "execbox code:
// the runner at ws://127.0.0.1:1 refused the connection; nothing was
// sent: …" (a WebSocket URL is quoted without its query). Anything after
// execute left is never marked: a runner that dies, breaks the connection,
// hangs or answers garbage after execute may have run guest code and its
// nested calls. A WebSocket write that fails proves nothing (part of the
// frame may have left), so only the stdio transport can prove an unsent
// execute; for a runner process that exits as it starts, whether the write
// came before or after its exit decides which of the two it is.
//
// A runner message larger than Config.MaxMessageBytes is not an
// outage but the guest's failure: the runner is cut off and the Result has
// exit 4, Stderr "serialization_error: runner message exceeds the size
// limit of N bytes: …", and runner_messages counts it as too_large.
//
// # Time limits
//
// The runner enforces timeoutMs itself and should be the one to report a
// timeout, but a real runner stuck in guest code answered a 5 s limit only
// after 13.9 s. So the host keeps its own timer: timeoutMs plus 100 ms,
// counted from started (from execute, plus a start-up allowance of 5 s, for
// a runner that sends no started). When it fires, or when ctx ends, the host
// sends cancel, cancels the nested calls in flight and waits
// Config.CancelGrace (default 250 ms) for done before it closes the
// transport under the runner. Once the host has cancelled, the outcome is a
// timeout, exit 124, whatever the runner does next: a done that reports the
// timeout itself is taken as it is, any other done contributes its logs only.
// When ctx was cancelled rather than timed out, Run returns ctx's error
// instead.
//
// The execution's time limit covers its nested calls: no nested call
// starts once it has passed (the guest is answered timeout), the calls in
// flight are cancelled when the host cancels, and each call's context
// carries the limit plus CancelGrace as its deadline. Run returns only
// after every nested call it started has returned; the context of those
// calls ends with the session, so a call the guest never awaited is
// cancelled when done arrives, and one still waiting its turn never starts.
//
// # Evidence
//
// Result.Evidence records, beside the result and never in Data:
//
//	execution_id        the id sent in execute
//	transport           "ws" or "stdio"
//	timeout_ms          the execution's time limit
//	tools               [{tool_id, provider, safe_name}] for every tool offered
//	nested_calls        [{call_id, tool_id, request_id, provider, safe_name,
//	                    ok, code}] for every tool_call served, in arrival
//	                    order; tool_id and request_id are empty for a tool
//	                    the host did not call, code is absent when ok
//	runner_messages     counts by kind: started, tool_call, done,
//	                    malformed, unknown_type, wrong_id, duplicate_call_id,
//	                    too_large
//	max_nested_calls    the limit of tool calls of the execution
//	nested_calls_refused how many tool calls the limit refused
//	cancelled           "timeout" or "context" when the host cancelled
//	runner_duration_ms  the durationMs the runner reported, when it did
//
// Logs name the driver, the request id and the execution id. They never
// contain the guest's code, inputs, results or console lines; only the
// stderr excerpt of a runner process is quoted as the runner wrote it.
package execbox

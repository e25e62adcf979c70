// Package tpmjs is the driver that runs tools on a TPMJS executor over HTTP.
//
// A catalog tool maps onto one call of POST {URL}/execute-tool: the call's
// Package is the npm package, Version its version, range or dist-tag ("" is
// "latest"), Target the tool's export name, Args the tool's params and Env
// the environment values the gateway resolved for it. The request carries
// Content-Type: application/json, X-TPMJS-Protocol-Version: 1.0 and, when an
// API key is configured, Authorization: Bearer <key>.
//
// # Validation before sending
//
// Some executors paste the package name and the version unquoted into a
// shell command and the export name into generated code, so all three are
// checked before a single byte leaves the gateway (see [ValidatePackageName],
// [ValidateVersion] and [ValidateExportName]). A call that fails the checks
// is a Result with exit code 2 and the executor receives nothing.
//
// The version grammar admits only what a shell takes literally inside one
// word: an exact version, a caret, tilde or x-range of one version
// ("^1.2.0", "~1.2", "1.x") and dist-tags. Comparator ranges, unions,
// hyphen ranges and "*" are refused, since an executor that pastes the
// version into a shell would read "<", ">" as redirections, "||" as a
// command list, a space as the start of another package and "*" as a glob.
//
// # Results
//
// Every answer of the executor, whatever its HTTP status, becomes a
// [drivers.Result]. Three wire forms are understood: protocol 1.0 with
// "error": {"code", "message"}; protocol 1.1 with "error": "text" next to
// "errorCode", "errorStage" and "retryable"; and the plain "error": "text"
// of the Deno form of the Vercel template, which carries no code at all.
// A failure is classified by its body first and by the HTTP status last,
// so that one failure gets one exit code on every executor:
//
//  1. an error code (1.0 "error.code", 1.1 "errorCode") names the class;
//     a code that hides the executor's own time limit ("Script exited with
//     code null", an npm install cut off with ETIMEDOUT) is a timeout;
//  2. without a code, the 1.1 "errorStage" (request 2, load 3, execute 1,
//     executor 5);
//  3. without either, the wording of the message (see the third column);
//  4. only then the status: 400 is 2, 401 and 403 are 4, an explicit
//     "success": false with a message under 200 or 500 is 1 (the Vercel
//     template answers a throwing tool with 500 and the bare message),
//     anything else 5.
//
// The classes:
//
//	exit  class                     codes                         plain-string wording (no code)
//	0     success                   "success": true               -
//	1     tool execution failed     TOOL_EXECUTION_ERROR,         any other message with "success": false
//	                                TOOL_EXECUTION_FAILED;        under 200 or 500 (a tool that throws)
//	                                "success": true with output
//	                                {"error": true, …}
//	2     invalid request           INVALID_REQUEST; this         (by status: 400)
//	                                driver's own validation
//	3     package or tool unusable  PACKAGE_NOT_FOUND,            404 `Export "X" not found in module`,
//	                                PACKAGE_IMPORT_FAILED,        404 "Tool not found", 400 "… is a factory
//	                                TOOL_NOT_FOUND, TOOL_INVALID, function but couldn't be initialized",
//	                                INVALID_TOOL,                 400 "Tool missing execute function";
//	                                SCHEMA_UNAVAILABLE,           any status: "Import '…' failed", "Module
//	                                TOOL_CONFIGURATION_REQUIRED   not found", "Cannot find module/package",
//	                                                              "npm install failed", "not found in
//	                                                              package", "does not have an execute()"
//	4     unauthorized              UNAUTHORIZED,                 (by status: 401, 403)
//	                                AUTHENTICATION_REQUIRED
//	5     executor error            INTERNAL_ERROR,               a stock server phrase ("Internal Server
//	                                EXECUTOR_INTERNAL_ERROR,      Error"); any other status; a body that
//	                                EXECUTOR_UNAVAILABLE, any     is not a JSON object of the protocol,
//	                                unknown code                  truncated, broken off or larger than
//	                                                              MaxResponseBytes; a redirect
//	124   timeout                   EXECUTION_TIMEOUT; the        "Script exited with code null",
//	                                driver's own deadline; the    FUNCTION_INVOCATION_TIMEOUT (the hosting
//	                                executor's kill hidden in     platform's 504 page)
//	                                another code (see 1. above)
//
// A wording a tool could also throw counts only under the status at which
// the executor itself sends it, because a tool's throw reaches the Vercel
// template's caller as a plain string under 500: a tool throwing "Missing
// required fields: query" is still exit 1.
//
// One failure cannot be told apart on the Vercel template: a failure of
// the executor itself inside its catch-all is answered exactly like a tool
// that throws (500 and the bare message), so it is exit 1 there and exit 5
// on the executors that send a code.
//
// Stdout is the tool's output as compact JSON text and Data the same output
// decoded with numbers as [encoding/json.Number], so that no digit is lost;
// both are empty when the answer has no "output". Data is always the tool's
// own output and nothing else. Stderr is empty on success and "CODE:
// message" on failure, where CODE is the executor's error code or one of
// this driver's: INVALID_REQUEST (validation), INVALID_RESPONSE (unusable
// body or redirect), TOOL_ERROR (a tool that caught its own error),
// EXECUTION_TIMEOUT (a time limit; the message says whose). A failure whose
// body names no code gets the 1.1 name of its class (TOOL_NOT_FOUND,
// PACKAGE_IMPORT_FAILED, TOOL_EXECUTION_FAILED, EXECUTOR_ERROR, …) and the
// HTTP status starts its message, so what the executor said stays visible. A protocol 1.1 failure ends with
// "(errorStage: load, retryable: true)" so an operator can tell whether a
// retry may help. Executor messages are cleaned (valid UTF-8, no control
// characters but line breaks and tabs, at most 8 KiB); an unusable body is
// quoted as a one-line excerpt of at most 200 bytes.
//
// A tool that catches its own failure and answers {"error": true,
// "message": …} with "success": true is reported as a failure because it
// did not do its work; an "error" field with any other value is ordinary
// output.
//
// # Evidence
//
// Result.Evidence (stored, redacted, in tool_result.json; never in Data)
// records what was actually sent and what the executor said about itself:
//
//	sent                       true; false for a call refused by validation
//	                           (then nothing else is recorded)
//	package, version, export   the packageName, version and name sent: the
//	                           default "latest" and a registry id's
//	                           configured version included
//	protocol_version           the X-TPMJS-Protocol-Version sent ("1.0")
//	executor_protocol_version  the protocolVersion the executor advertised
//	                           in /health or /info, once a probe learned it
//	executor_status            the HTTP status of the answer
//	execution_time_ms          the answer's executionTimeMs, when it has one
//	error_format               the form of a failure's "error": "1.0"
//	                           (object), "1.1" (string with errorCode or
//	                           errorStage) or "plain" (string alone)
//	time_limit_ms              the driver's own time limit of the call
//
// A call that ran out of time has no executor_status. A call that returned
// an error (no answer) has no Result and so no Evidence.
//
// # Errors
//
// Run returns an error (the contract's "throw", reported to the caller as
// UNAVAILABLE) only when no answer arrived: the connection was refused or
// reset before the response headers, a name did not resolve, TLS failed,
// the caller cancelled the context, or the driver was closed. Once the
// response headers arrived, the executor has answered and the outcome is a
// Result, even when the body then breaks off.
//
// An error is marked [drivers.ErrNotDispatched] when it proves that no byte
// of the call left the gateway, so that a retry with the same request id
// may run it: the driver was closed; the context had ended before the
// request was handed to the transport; or the request never got a
// connection, as net/http reports through httptrace's GotConn (connection
// refused, a name that did not resolve, a TLS handshake that failed or a
// certificate that is not trusted, a proxy that could not be reached or
// refused the tunnel, or a deadline that passed while connecting). The
// message says so: "the executor at http://127.0.0.1:1 refused the
// connection; nothing was sent". Once a connection was handed out, any
// failure (a reset after the request was read, no answer before the
// deadline, a body that breaks off) counts as dispatched, even when the
// request may not have been written yet: in doubt, the call may have run.
// A deadline that passes while connecting is such an error, not a timeout
// Result: no tool was started, so none timed out. Only net/http's own
// transport reports connections; with a Config.HTTPClient whose Transport
// is anything else, only the first two cases are marked. The background
// probes of /health and /info never delay or gate a call, so their
// failures mark nothing.
//
// # Time limits
//
// A call gets the shorter of Config.CallTimeout and the executor's
// advertised maxExecutionTimeMs (from /info) minus a margin of 5 seconds
// (a quarter of the limit when that is less), so the driver's deadline
// always comes before the executor's own kill. When that time runs out the
// call ends with exit code 124 and Stderr "EXECUTION_TIMEOUT: no complete
// answer from the executor within D (W)", where W names the limit that
// ended it: the driver's time limit, or the driver's time limit set below
// the executor's advertised maximum. The context's deadline bounds a call
// only until it is sent (passing before that, it is an error marked
// drivers.ErrNotDispatched): an executor runs a tool to its end whether or
// not its client still waits, so a caller's deadline is not the tool's
// end, and a timeout recorded at it would be false. Cancelling the context
// abandons the call at any time, with an error saying that the tool may
// still be running, never a Result. The driver keeps its own deadline because executors
// do not report their own limits reliably. When an executor's own limit
// ends a call anyway (its limit is not advertised, or its clock started
// earlier), its answer is a timeout too, whatever code it wears: the Node
// templates' "Script exited with code null" and an npm install cut off
// with ETIMEDOUT, and a hosting platform's 504 FUNCTION_INVOCATION_TIMEOUT
// page; Stderr then says "the executor's own time limit ended the call"
// (or "the hosting platform's") and quotes the answer.
//
// # Probes and engine
//
// [Driver.Start] asks GET /health and GET /info in the background, now and
// every ProbeInterval, each bounded by HealthTimeout; a busy executor can
// take seconds to answer /health. Run never waits for a probe and failures
// are only logged. [Driver.Engine] is "tpmjs" until a probe answered, then
// "tpmjs:NAME/VERSION" from /info's name and version, or from /health where
// there is no /info (the Deno executors): the runtime from "runtime",
// "info.runtime" or the presence of "denoVersion", the version from
// "implementationVersion" or "version". For example
// "tpmjs:railway-executor/1.0.0", "tpmjs:deno-executor/1.1.0" (the 1.1 Deno
// executor) or "tpmjs:deno-executor/1.0.0" (the Deno form of the Vercel
// template). Both parts are reduced to short lowercase
// slugs. What a probe learned stays when later probes fail.
//
// # Traces and logs
//
// When Config.Trace is set, every exchange with /execute-tool is handed to
// it as a [drivers.Trace]: the request body as sent (env values included,
// for the gateway to redact), the status, the response body cut to 64 KiB,
// and what went wrong with the exchange itself. Headers are not part of a
// trace, so the Authorization header never is. A call rejected by
// validation sends nothing and leaves no trace. Logs name the driver, the
// request id, the package and the export, never env values, params or the
// API key.
package tpmjs

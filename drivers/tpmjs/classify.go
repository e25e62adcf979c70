package tpmjs

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// classify decides the failure class of an answer that is not a success,
// from the body first and the HTTP status last, so that one failure gets
// one exit code whatever executor reports it:
//
//  1. an error code (1.0 "error.code" or 1.1 "errorCode") names the class,
//     refined by the message where an executor hides its own time limit
//     behind another code;
//  2. without a code, the 1.1 "errorStage" names it;
//  3. without either, the message text: the Deno executor answers plain
//     strings whose wording is stable (see textClass);
//  4. only then the HTTP status.
//
// It returns the exit code and the code and message for Stderr. An inferred
// code is one of the protocol's 1.1 names; the message then starts with the
// HTTP status, so the reader sees what the executor really said.
func classify(status int, fields map[string]json.RawMessage, code, message string) (int, string, string) {
	if code != "" {
		exit := exitCodeFor(code)
		if executorKill(code, message) {
			return ExitTimeout, codeTimeout, fmt.Sprintf("the executor's own time limit ended the call (it answered %s: %s)",
				code, orDefault(message, "(no message)"))
		}
		return exit, code, message
	}
	withStatus := fmt.Sprintf("HTTP %d: %s", status, orDefault(message, "the executor reported a failure without a message"))
	if stage := stringField(fields["errorStage"]); stage != "" {
		if exit, inferred, ok := stageClass(stage); ok {
			return exit, inferred, withStatus
		}
	}
	if exit, inferred, ok := textClass(status, message); ok {
		return exit, inferred, withStatus
	}
	exit, inferred := statusClass(status, fields, message)
	return exit, inferred, withStatus
}

// executorKill reports whether a coded failure is really the executor's own
// time limit: the Node templates report a child killed at the limit as
// TOOL_EXECUTION_ERROR "Script exited with code null" and an npm install
// cut off at its limit as PACKAGE_NOT_FOUND "… ETIMEDOUT".
func executorKill(code, message string) bool {
	switch code {
	case "TOOL_EXECUTION_ERROR", "TOOL_EXECUTION_FAILED", "INTERNAL_ERROR":
		return strings.Contains(message, "exited with code null")
	case "PACKAGE_NOT_FOUND", "PACKAGE_IMPORT_FAILED":
		return strings.Contains(message, "ETIMEDOUT")
	}
	return false
}

// stageClass maps a 1.1 errorStage onto a class.
func stageClass(stage string) (int, string, bool) {
	switch stage {
	case "request":
		return ExitInvalidRequest, codeInvalidRequest, true
	case "load":
		return ExitNotFound, "PACKAGE_IMPORT_FAILED", true
	case "execute":
		return ExitToolFailed, "TOOL_EXECUTION_FAILED", true
	case "executor":
		return ExitExecutorError, codeExecutorError, true
	}
	return 0, "", false
}

// textRule is one wording of a code-less failure. A rule whose wording a
// tool could also throw holds only under the status at which the executor
// itself sends it: on the Vercel template a tool's throw arrives as a
// plain string too, under 500, and must stay the tool's failure.
type textRule struct {
	status   int      // the status the rule needs; 0 for any
	contains []string // lowercase fragments that must all occur
	exit     int
	code     string
}

// textRules are the stable wordings of executors that answer plain strings:
// the Deno form of the Vercel template (404 unknown export, 400 factory or
// missing execute, 500 for import failures), the Deno runtime's own import
// errors, and the Node template's messages for an executor that sends them
// without a code. The first match wins; the timeout rules come first
// because a kill can happen in any phase.
var textRules = []textRule{
	{0, []string{"exited with code null"}, ExitTimeout, codeTimeout},
	{0, []string{"function_invocation_timeout"}, ExitTimeout, codeTimeout},
	{http.StatusNotFound, []string{"export ", "not found in module"}, ExitNotFound, "TOOL_NOT_FOUND"},
	{http.StatusNotFound, []string{"tool not found"}, ExitNotFound, "TOOL_NOT_FOUND"},
	{http.StatusBadRequest, []string{"factory function but couldn't be initialized"}, ExitNotFound, "TOOL_CONFIGURATION_REQUIRED"},
	{http.StatusBadRequest, []string{"missing execute function"}, ExitNotFound, "INVALID_TOOL"},
	{0, []string{"import '", "failed"}, ExitNotFound, "PACKAGE_IMPORT_FAILED"},
	{0, []string{"module not found"}, ExitNotFound, "PACKAGE_IMPORT_FAILED"},
	{0, []string{"err_module_not_found"}, ExitNotFound, "PACKAGE_IMPORT_FAILED"},
	{0, []string{"cannot find module"}, ExitNotFound, "PACKAGE_IMPORT_FAILED"},
	{0, []string{"cannot find package"}, ExitNotFound, "PACKAGE_IMPORT_FAILED"},
	{0, []string{"npm install failed"}, ExitNotFound, "PACKAGE_IMPORT_FAILED"},
	{0, []string{"not found in package"}, ExitNotFound, "TOOL_NOT_FOUND"},
	{0, []string{"does not have an execute()"}, ExitNotFound, "INVALID_TOOL"},
}

// textClass classifies a code-less failure by its wording.
func textClass(status int, message string) (int, string, bool) {
	lower := strings.ToLower(message)
	for _, r := range textRules {
		if r.status != 0 && r.status != status {
			continue
		}
		all := true
		for _, c := range r.contains {
			if !strings.Contains(lower, c) {
				all = false
				break
			}
		}
		if all {
			return r.exit, r.code, true
		}
	}
	return 0, "", false
}

// statusClass is the last resort for a failure whose body names nothing
// known. An explicit "success": false with a message under 200 or 500 is
// the tool's failure: the Deno form of the Vercel template answers a tool
// that throws with 500 and the bare message, and cannot tell it apart from
// a failure of its own.
func statusClass(status int, fields map[string]json.RawMessage, message string) (int, string) {
	switch status {
	case http.StatusBadRequest:
		return ExitInvalidRequest, codeInvalidRequest
	case http.StatusUnauthorized, http.StatusForbidden:
		return ExitUnauthorized, codeUnauthorized
	case http.StatusOK, http.StatusInternalServerError:
		var success bool
		explicit := json.Unmarshal(fields["success"], &success) == nil && !success
		if explicit && message != "" && !genericServerError(message) {
			return ExitToolFailed, "TOOL_EXECUTION_FAILED"
		}
	}
	return ExitExecutorError, codeExecutorError
}

// genericServerError reports whether a message is only a server's stock
// phrase, which says the executor failed rather than the tool.
func genericServerError(message string) bool {
	switch strings.ToLower(strings.TrimSpace(message)) {
	case "internal server error", "internal error", "service unavailable", "bad gateway", "not found":
		return true
	}
	return false
}

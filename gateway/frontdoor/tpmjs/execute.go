package tpmjsdoor

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/internal/ident"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// Name is the door's name: its key under front_doors and the front_door
// recorded in request.json.
const Name = "tpmjs"

// Headers the door reads beside the protocol's own.
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerRunID          = "Toolgate-Run-Id"
	headerStepID         = "Toolgate-Step-Id"
	headerPolicyRef      = "Toolgate-Policy-Ref"
)

// requestIDPattern is the gateway's rule for request ids, checked here too
// so that a bad Idempotency-Key is refused before anything is recorded.
const requestIDPattern = ident.RequestID

// freshIDEncoding spells fresh request ids: lowercase base32 without
// padding, 26 characters for 16 random bytes.
var freshIDEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// badRequest is a request the door refuses before any RunTool call.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{msg: fmt.Sprintf(format, args...)} }

// executeRequest is a decoded POST /execute-tool body.
type executeRequest struct {
	PackageName string
	Name        string
	Version     string
	Params      map[string]any
	Env         map[string]string
}

// wireRequest is the body as sent. importUrl is accepted and ignored: the
// gateway's driver decides where code comes from.
type wireRequest struct {
	PackageName *string         `json:"packageName"`
	Name        *string         `json:"name"`
	ExportName  *string         `json:"exportName"`
	Version     *string         `json:"version"`
	ImportURL   json.RawMessage `json:"importUrl"`
	Params      json.RawMessage `json:"params"`
	Env         json.RawMessage `json:"env"`
}

// decodeExecute decodes one JSON object, numbers kept as json.Number so
// that they canonicalise exactly as over gRPC.
func decodeExecute(body []byte) (executeRequest, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var w wireRequest
	if err := dec.Decode(&w); err != nil {
		return executeRequest{}, badf("body: not a JSON object of the protocol: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return executeRequest{}, badf("body: data after the JSON object")
	}
	var r executeRequest
	switch {
	case w.Name != nil && w.ExportName != nil && *w.Name != *w.ExportName:
		return executeRequest{}, badf("name and exportName: both given and different")
	case w.Name != nil:
		r.Name = *w.Name
	case w.ExportName != nil:
		r.Name = *w.ExportName
	}
	if w.PackageName != nil {
		r.PackageName = *w.PackageName
	}
	if r.PackageName == "" || r.Name == "" {
		return executeRequest{}, badf("packageName and name: required")
	}
	if w.Version != nil {
		r.Version = *w.Version
	}
	var err error
	if r.Params, err = decodeParams(w.Params); err != nil {
		return executeRequest{}, err
	}
	if r.Env, err = decodeEnv(w.Env); err != nil {
		return executeRequest{}, err
	}
	return r, nil
}

// decodeParams decodes params: an object, or absent or null for none.
func decodeParams(raw json.RawMessage) (map[string]any, error) {
	params := map[string]any{}
	if len(raw) == 0 || string(raw) == "null" {
		return params, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&params); err != nil || params == nil {
		return nil, badf("params: want an object")
	}
	return params, nil
}

// decodeEnv decodes env: an object of strings, or absent or null for none.
func decodeEnv(raw json.RawMessage) (map[string]string, error) {
	env := map[string]string{}
	if len(raw) == 0 || string(raw) == "null" {
		return env, nil
	}
	if err := json.Unmarshal(raw, &env); err != nil || env == nil {
		return nil, badf("env: want an object of strings")
	}
	return env, nil
}

// resolved is the tool a request names.
type resolved struct {
	toolID   string
	packaged bool // a TPMJS tool: its failures carry executor codes
}

// resolve maps {packageName, name, version} onto a tool id (see the
// package documentation for the order).
func (d *Door) resolve(r executeRequest) (resolved, error) {
	anyVersion := r.Version == "" || r.Version == "latest"
	if matches := d.packaged[r.PackageName+"\x00"+r.Name]; len(matches) > 0 {
		for _, e := range matches {
			if e.Version == r.Version {
				return resolved{toolID: e.ID, packaged: true}, nil
			}
		}
		if !anyVersion {
			return resolved{}, badf("version %q: %s::%s is served at version %q", r.Version, r.PackageName, r.Name, matches[0].Version)
		}
		return resolved{toolID: matches[0].ID, packaged: true}, nil
	}
	if d.catalogPackage != "" && r.PackageName == d.catalogPackage {
		e, known := d.byID[r.Name]
		if known && !anyVersion && r.Version != e.Version {
			return resolved{}, badf("version %q: tool %s is served at version %q", r.Version, r.Name, e.Version)
		}
		// An unknown id goes on: the gateway decides it unknown_tool and
		// records it, as over gRPC.
		return resolved{toolID: r.Name, packaged: known && e.Package != ""}, nil
	}
	if !anyVersion {
		return resolved{}, badf("version %q: registry tools run at the gateway's configured registry_version; send no version or \"latest\"", r.Version)
	}
	return resolved{toolID: r.PackageName + "::" + r.Name, packaged: true}, nil
}

// runRequest builds the RunTool request of an execute request: params
// plus "_env" when env is not empty, ctx from the optional headers.
func runRequest(requestID, toolID string, r executeRequest, h http.Header) (*toolgatev1.RunToolRequest, error) {
	args := r.Params
	if len(r.Env) > 0 {
		if _, both := args["_env"]; both {
			return nil, badf("params._env and env: give the environment once, in env")
		}
		env := make(map[string]any, len(r.Env))
		for k, v := range r.Env {
			env[k] = v
		}
		args = make(map[string]any, len(r.Params)+1)
		for k, v := range r.Params {
			args[k] = v
		}
		args["_env"] = env
	}
	s, err := structpb.NewStruct(args)
	if err != nil {
		return nil, badf("params: %v", err)
	}
	return &toolgatev1.RunToolRequest{
		RequestId: requestID, ToolId: toolID, Args: s,
		Ctx: &toolgatev1.RunContext{
			RunId: h.Get(headerRunID), StepId: h.Get(headerStepID), PolicyRef: h.Get(headerPolicyRef),
		},
	}, nil
}

// requestID returns the request's Idempotency-Key, or a fresh id.
func requestID(h http.Header) (string, error) {
	if key := h.Get(headerIdempotencyKey); key != "" {
		if !requestIDPattern.MatchString(key) {
			return "", badf("Idempotency-Key: must match %s", requestIDPattern)
		}
		return key, nil
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("tpmjsdoor: a fresh request id: %w", err)
	}
	return "tpmjs-" + freshIDEncoding.EncodeToString(b[:]), nil
}

// execute serves POST /execute-tool: authenticate, read and map the body,
// run the call, answer in the protocol's shape.
func (d *Door) execute(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	caller, ok := d.caller(w, r)
	if !ok {
		return
	}
	elapsed := func() int64 { return time.Since(start).Milliseconds() }
	id, err := requestID(r.Header)
	if err != nil {
		d.writeBadRequest(w, err, elapsed())
		return
	}
	w.Header().Set(headerIdempotencyKey, id)
	body, err := frontdoor.ReadBody(w, r, d.maxBody)
	if err != nil {
		d.writeBodyError(w, err, elapsed())
		return
	}
	req, err := d.prepareCall(id, body, r.Header)
	if err != nil {
		d.writeBadRequest(w, err, elapsed())
		return
	}
	resp, err := d.gw.Run(r.Context(), caller.Caller, gateway.Call{FrontDoor: Name, Identity: caller.Identity, Request: req.run})
	if err != nil {
		d.writeRunError(w, id, err, elapsed())
		return
	}
	rep := replyOf(id, req.tool, resp, elapsed())
	if ms := rep.Toolgate.RetryAfterMS; ms > 0 {
		// HTTP's own spelling of the hint, in whole seconds, rounded up.
		w.Header().Set("Retry-After", strconv.FormatInt((ms+999)/1000, 10))
	}
	d.writeJSON(w, http.StatusOK, rep)
}

// writeBodyError answers a body ReadBody refused, with its status: 413
// and 400 as INVALID_REQUEST, 503 (the doors' body budget) as the
// protocol's EXECUTOR_BUSY, which clients retry.
func (d *Door) writeBodyError(w http.ResponseWriter, err error, ms int64) {
	status, code, msg := http.StatusBadRequest, "INVALID_REQUEST", err.Error()
	if be, ok := errors.AsType[*frontdoor.BodyError](err); ok {
		status = be.Status
	}
	switch status {
	case http.StatusServiceUnavailable:
		code = "EXECUTOR_BUSY"
	case http.StatusUnauthorized:
		code = "UNAUTHORIZED"
	}
	d.writeError(w, status, code, msg, ms)
}

// preparedCall is a request mapped onto RunTool.
type preparedCall struct {
	tool resolved
	run  *toolgatev1.RunToolRequest
}

// prepareCall decodes body and maps it onto a RunTool request.
func (d *Door) prepareCall(id string, body []byte, h http.Header) (preparedCall, error) {
	er, err := decodeExecute(body)
	if err != nil {
		return preparedCall{}, err
	}
	tool, err := d.resolve(er)
	if err != nil {
		return preparedCall{}, err
	}
	run, err := runRequest(id, tool.toolID, er, h)
	if err != nil {
		return preparedCall{}, err
	}
	return preparedCall{tool: tool, run: run}, nil
}

// writeBadRequest answers 400 for a request refused before any call, or
// 500 when the door itself failed.
func (d *Door) writeBadRequest(w http.ResponseWriter, err error, ms int64) {
	var bad *badRequest
	if errors.As(err, &bad) {
		d.writeError(w, http.StatusBadRequest, "INVALID_REQUEST", strings.TrimSpace(bad.msg), ms)
		return
	}
	d.log.Error("tpmjs door: preparing a call", "err", err)
	d.writeError(w, http.StatusInternalServerError, "INTERNAL_ERROR", "the gateway could not prepare the call", ms)
}

// Package tpmjsdoor serves the TPMJS executor protocol (levels 1 and 2) and
// the registry search the published TPMJS client reads, in front of
// Toolgate's RunTool pipeline.
//
// It is the front door "tpmjs", on with one line of configuration:
//
//	front_doors:
//	  tpmjs: {listen: 127.0.0.1:8787}
//
// Routes, each also under "/api" (the protocol's extended form):
//
//	GET  /health            protocol and gateway version; the drivers'
//	                        cached health for an authenticated caller
//	GET  /info              the executor's capabilities
//	POST /execute-tool      one tool call, as one RunTool call
//	GET  /api/tools/search  the catalog's tools policy could allow the
//	                        caller, in the shape @tpmjs/registry-search and
//	                        @tpmjs/registry-execute 0.1.5 read
//
// # From a request to a RunTool call
//
// The tool id of {packageName, name, version} is, first match wins:
//
//  1. the catalog's packaged (TPMJS) tool with that package and export
//     name, preferring the one at the requested version, then the lowest
//     id;
//  2. when catalog_package is set and packageName equals it, the catalog
//     tool whose id is name (for example "_catalog::workspace.readFile");
//  3. otherwise the registry id "packageName::name", which the gateway
//     serves when a tpmjs driver has allow_registry_ids and otherwise
//     decides as unknown_tool, recorded like any other call.
//
// version must be empty, "latest" or the catalog tool's version (the search
// reports that version, so the published client always matches); a
// registry id runs at the driver's registry_version and takes no other
// version. The arguments are params, plus "_env": env when env is not
// empty: from there env is exactly args._env (only the variables the tool's
// caller_env names, kept out of the evidence). importUrl is ignored: the
// gateway's driver decides where code comes from.
//
// The request id is the Idempotency-Key header, or a fresh "tpmjs-…" id;
// the reply always carries it in Idempotency-Key, so a client retries a
// call by sending the same key. Optional headers Toolgate-Run-Id,
// Toolgate-Step-Id and Toolgate-Policy-Ref fill RunTool's ctx.
//
// # The reply
//
// The protocol's {success, output, error: {code, message}, executionTimeMs}
// plus an extension object "toolgate" that clients ignore: request_id,
// decision, rule_id, reason, suggestion, evidence_refs, pending_approval and the
// tool's exit code. A denied call, an unknown tool and a call waiting for
// approval are HTTP 200 with success false and the codes POLICY_DENIED,
// TOOL_NOT_FOUND and APPROVAL_REQUIRED; the gateway's own failures use
// HTTP statuses (see statusFor).
//
// # Keys
//
// The published client sends no Authorization header, so a caller key may
// also be given in the base URL's path: http://gw:8787/k/<key>/execute-tool.
// The front-door plumbing strips and checks it; this package sees only the
// caller it names.
package tpmjsdoor

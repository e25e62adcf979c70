package agentspaces

import (
	"strings"
	"testing"
)

func TestOperationValidation(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, tc := range []struct {
		name, op string
		field    string // "" when valid
	}{
		{"a message is valid", `{"type":"message","content":"hi"}`, ""},
		{"a message needs content", `{"type":"message"}`, "content"},
		{"a message of 100001 characters is too long", `{"type":"message","content":"` + long(100001) + `"}`, "content"},
		{"a createFile with every field is valid", `{"type":"createFile","id":"f","path":"a/b.txt","content":"x","encoding":"base64","overwrite":true}`, ""},
		{"a createFile needs content", `{"type":"createFile","path":"a"}`, "content"},
		{"an absolute path is refused", `{"type":"readFile","path":"/etc/passwd"}`, "path"},
		{"a dot-dot segment is refused", `{"type":"readFile","path":"a/../b"}`, "path"},
		{"a dot-dot inside a name is a name", `{"type":"readFile","path":"a..b"}`, ""},
		{"a NUL byte is refused", `{"type":"readFile","path":"a\u0000b"}`, "path"},
		{"a path of 256 characters is refused", `{"type":"readFile","path":"` + long(256) + `"}`, "path"},
		{"a path of 255 characters is valid", `{"type":"readFile","path":"` + long(255) + `"}`, ""},
		{"an empty path is refused", `{"type":"deleteFile","path":""}`, "path"},
		{"a number as path is refused", `{"type":"deleteFile","path":7}`, "path"},
		{"a null path is refused", `{"type":"deleteFile","path":null}`, "path"},
		{"an unknown encoding is refused", `{"type":"readFile","path":"a","encoding":"latin1"}`, "encoding"},
		{"an overwrite string is refused", `{"type":"createFile","path":"a","content":"","overwrite":"yes"}`, "overwrite"},
		{"edits must be a list", `{"type":"editFile","path":"a","edits":{}}`, "edits"},
		{"an edit needs both contents", `{"type":"editFile","path":"a","edits":[{"oldContent":"x"}]}`, "edits"},
		{"an edit with an extra field is refused", `{"type":"editFile","path":"a","edits":[{"oldContent":"x","newContent":"y","all":true}]}`, "edits"},
		{"a shell command of 4096 characters is valid", `{"type":"shell","command":"` + long(4096) + `"}`, ""},
		{"a shell command of 4097 characters is refused", `{"type":"shell","command":"` + long(4097) + `"}`, "command"},
		{"a timeout of 999 ms is refused", `{"type":"shell","command":"x","timeout":999}`, "timeout"},
		{"a timeout of 1000 ms is valid", `{"type":"shell","command":"x","timeout":1000}`, ""},
		{"a timeout over an hour is refused", `{"type":"shell","command":"x","timeout":3600001}`, "timeout"},
		{"a fractional timeout is refused", `{"type":"shell","command":"x","timeout":1500.5}`, "timeout"},
		{"a cwd with dot-dot is refused", `{"type":"shell","command":"x","cwd":".."}`, "cwd"},
		{"env must hold strings", `{"type":"shell","command":"x","env":{"A":1}}`, "env"},
		{"an env name with '=' is refused", `{"type":"shell","command":"x","env":{"A=B":"1"}}`, "env"},
		{"an unknown type is refused", `{"type":"format","path":"/"}`, "type"},
		{"a missing type is refused", `{"path":"a"}`, "type"},
		{"an unknown field is refused", `{"type":"readFile","path":"a","follow":true}`, "follow"},
		{"an id with a newline is refused", `{"type":"readFile","id":"a\nb","path":"a"}`, "id"},
		{"an id of 129 bytes is refused", `{"type":"readFile","id":"` + long(129) + `","path":"a"}`, "id"},
		{"an id that is a number is refused", `{"type":"readFile","id":1,"path":"a"}`, "id"},
		{"an operation that is not an object is refused", `[1]`, "operations"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := parseOperation([]byte(tc.op))
			if tc.field == "" && op.Invalid != "" {
				t.Fatalf("refused: %s", op.Invalid)
			}
			if tc.field != "" && (op.Invalid == "" || op.Field != tc.field) {
				t.Fatalf("field %q (%q), want %q refused", op.Field, op.Invalid, tc.field)
			}
		})
	}
}

func TestMessageForms(t *testing.T) {
	for _, tc := range []struct {
		name, body     string
		kind, decision string
		malformed      bool
	}{
		{"a batch without a version is 1.0", `{"operations":[]}`, kindBatch, "", false},
		{"a batch of version 1.3 is accepted", `{"protocolVersion":"1.3","operations":[]}`, kindBatch, "", false},
		{"a batch of version 2.0 is refused", `{"protocolVersion":"2.0","operations":[]}`, "", "", true},
		{"a batch with an unknown field is refused", `{"operations":[],"mode":"fast"}`, "", "", true},
		{"operations that are not a list are refused", `{"operations":{}}`, "", "", true},
		{"trailing data is refused", `{"operations":[]} {}`, "", "", true},
		{"a structured approval", `{"approval":{"operationId":"x","decision":"approved"}}`, kindApproval, "approved", false},
		{"a structured denial with an approval id", `{"approval":{"approvalId":"apr_x","decision":"denied","reason":"no"}}`, kindApproval, "denied", false},
		{"an approval with another decision word is refused", `{"approval":{"operationId":"x","decision":"maybe"}}`, "", "", true},
		{"an approval naming nothing is refused", `{"approval":{"decision":"approved"}}`, "", "", true},
		{"an approval with an unknown field is refused", `{"approval":{"operationId":"x","decision":"approved","as":"root"}}`, "", "", true},
		{"a user message approving, any case and space", `{"type":"userMessage","content":"  Approved \n"}`, kindUserMessage, "approved", false},
		{"a user message denying", `{"type":"userMessage","content":"denied"}`, kindUserMessage, "denied", false},
		{"a user message of other words", `{"type":"userMessage","content":"go ahead"}`, kindUserMessage, "", false},
		{"events holding a user message", `{"events":[{"type":"userMessage","content":"approved"}]}`, kindUserMessage, "approved", false},
		{"events without a user message are refused", `{"events":[{"type":"readFile"}]}`, "", "", true},
		{"an empty object is refused", `{}`, "", "", true},
		{"a list is refused", `[]`, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := parseMessage([]byte(tc.body), 256)
			if tc.malformed {
				if err == nil {
					t.Fatalf("accepted as %+v", m)
				}
				return
			}
			if err != nil || m.Kind != tc.kind || m.Decision != tc.decision {
				t.Fatalf("got %+v, %v", m, err)
			}
		})
	}
}

func TestDuplicateOperationIDsAreRefused(t *testing.T) {
	m, err := parseMessage([]byte(`{"operations":[{"type":"message","id":"a","content":""},{"type":"message","id":"a","content":""}]}`), 256)
	if err != nil || m.Ops[0].Invalid != "" || m.Ops[1].Field != "id" {
		t.Fatalf("%+v %v", m, err)
	}
}

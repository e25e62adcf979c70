package redact

import (
	"bytes"
	"encoding/json"
	"slices"
)

// Structure says what is secret in some JSON documents where no key name does:
//
//   - a name/value pair whose name names a secret: {"name": "DB_PASSWORD", "value": "…"}, as in
//     Kubernetes and ECS env lists, GitLab CI variables, CloudFormation parameters;
//   - the data of a Kubernetes Secret: {"kind": "Secret", "data": {…}, "stringData": {…}};
//   - the payload of a secret manager version: {"name": "projects/p/secrets/s/versions/3",
//     "payload": {…}};
//   - the attributes Terraform state lists as sensitive: {"attributes": {"password": "…"},
//     "sensitive_attributes": [[{"type": "get_attr", "value": "password"}]]}, and the result of a
//     random_password resource, which its provider's schema marks sensitive.
//
// The first pass over a document (scanDocument) notes these values; the second redacts them
// whole, as it does values under a secret key name.

// objectFrame is what the first pass remembers of one object while inside it.
type objectFrame struct {
	nameIsSecret   bool // a "name" or "key" member names a secret
	kindSecret     bool // "kind": "Secret"
	secretResource bool // "name" is a secret manager resource name
	value          span // the "value" member
	data           []span
	payload        span
	attributes     map[string]span // members of the "attributes" object
	sensitive      span            // the "sensitive_attributes" member
	resourceType   string          // "type" of a Terraform resource
	// parentKey is the key of the member this object is the value of.
	parentKey string
	members   map[string]span // kept only for an "attributes" object
}

var (
	pairNameKeys  = []string{"name", "Name", "key", "Key", "variable", "ParameterKey", "OptionName"}
	pairValueKeys = []string{"value", "Value", "ParameterValue"}
)

func (w *jsonWalker) enterObject() {
	if !w.collectLong || w.r.knownOnly {
		return
	}
	f := objectFrame{parentKey: w.pendingKey}
	if f.parentKey == "attributes" {
		f.members = map[string]span{}
	}
	w.frames = append(w.frames, f)
}

// member records one member of the innermost object: its key and its value doc[start:end].
func (w *jsonWalker) member(key []byte, start, end int) {
	if !w.collectLong || w.r.knownOnly || len(w.frames) == 0 {
		return
	}
	f := &w.frames[len(w.frames)-1]
	k := string(key)
	v := span{start: start, end: end}
	if f.members != nil {
		f.members[k] = v
	}
	var str []byte
	if w.doc[start] == '"' {
		str = unquote(w.doc[start+1 : end-1])
	}
	switch {
	case slices.Contains(pairNameKeys, k):
		if str != nil && w.r.isSecretKey(str) {
			f.nameIsSecret = true
		}
		if k == "name" && bytes.Contains(str, []byte("/secrets/")) {
			f.secretResource = true
		}
	case slices.Contains(pairValueKeys, k):
		f.value = v
	case k == "kind":
		f.kindSecret = string(str) == "Secret"
	case k == "type":
		f.resourceType = string(str)
	case k == "data" || k == "stringData":
		f.data = append(f.data, v)
	case k == "payload":
		f.payload = v
	case k == "sensitive_attributes":
		f.sensitive = v
	}
}

func (w *jsonWalker) leaveObject() {
	if !w.collectLong || w.r.knownOnly || len(w.frames) == 0 {
		return
	}
	f := w.frames[len(w.frames)-1]
	w.frames = w.frames[:len(w.frames)-1]
	if f.nameIsSecret && f.value.end > 0 {
		w.secretValues = append(w.secretValues, f.value)
	}
	if f.kindSecret {
		w.secretValues = append(w.secretValues, f.data...)
	}
	if f.secretResource && f.payload.end > 0 {
		w.secretValues = append(w.secretValues, f.payload)
	}
	if f.attributes != nil && f.sensitive.end > 0 {
		var paths [][]struct{ Type, Value string }
		if json.Unmarshal(w.doc[f.sensitive.start:f.sensitive.end], &paths) == nil {
			for _, p := range paths {
				if len(p) > 0 && p[0].Type == "get_attr" {
					if v, ok := f.attributes[p[0].Value]; ok {
						w.secretValues = append(w.secretValues, v)
					}
				}
			}
		}
	}
	if f.attributes != nil && len(w.frames) > 0 && w.frames[len(w.frames)-1].resourceType == "random_password" {
		for _, name := range []string{"result", "bcrypt_hash"} {
			if v, ok := f.attributes[name]; ok {
				w.secretValues = append(w.secretValues, v)
			}
		}
	}
	if f.members != nil && len(w.frames) > 0 {
		w.frames[len(w.frames)-1].attributes = f.members
	}
}

package evidence

import (
	"time"
	"unicode/utf8"
)

// Reading manifests quickly. Verification parses one manifest per
// request, and the strict decode (three passes of encoding/json over the
// bytes, then a fourth for duplicate names) was a sixth of the work of
// replaying a request. decodeManifestFast reads the manifests a gateway
// writes in one pass, and declines (ok false) everything it is not sure
// the strict decode would read the same way: an unknown or differently
// cased name, a name given twice, an escape in a string, null, a number
// that is not a plain integer of at most 18 digits, a field of the wrong
// type, trailing data. ParseManifest then runs the strict decode, so what
// is rejected, and why, is exactly what it always was; what the fast
// path accepts the strict decode reads to the same manifest
// (FuzzManifestFastDecode checks both).

// manifestFields are the names decodeManifestFast knows, each a bit of a
// seen-mask.
var manifestFields = [...]string{"version", "request_id", "canonical_request_hash", "engine_ref",
	"policy_set_digest", "outcome", "error", "recovered", "artifacts", "redactions",
	"fingerprint_key_id", "created_at", "signature"}

// decodeManifestFast decodes data as described above; ok is false when it
// declines.
func decodeManifestFast(data []byte) (m Manifest, ok bool) {
	s := jsonScan{data: data}
	version := int64(-1)
	ok = s.object(func(name string) bool {
		switch name {
		case "version":
			return s.integer(&version)
		case "request_id":
			return s.str(&m.RequestID)
		case "canonical_request_hash":
			return s.str(&m.CanonicalRequestHash)
		case "engine_ref":
			return s.str(&m.EngineRef)
		case "policy_set_digest":
			return s.str(&m.PolicySetDigest)
		case "outcome":
			return s.str(&m.Outcome)
		case "error":
			return s.str(&m.Error)
		case "recovered":
			return s.str(&m.Recovered)
		case "artifacts":
			m.Artifacts = []ArtifactDigest{}
			return s.array(func() bool {
				m.Artifacts = append(m.Artifacts, ArtifactDigest{})
				return s.artifact(&m.Artifacts[len(m.Artifacts)-1])
			})
		case "redactions":
			m.Redactions = []Redaction{}
			return s.array(func() bool {
				m.Redactions = append(m.Redactions, Redaction{})
				return s.redaction(&m.Redactions[len(m.Redactions)-1])
			})
		case "fingerprint_key_id":
			return s.str(&m.FingerprintKeyID)
		case "created_at":
			return s.timestamp(&m.CreatedAt)
		case "signature":
			m.Signature = &Signature{}
			return s.signature(m.Signature)
		}
		return false
	}, manifestFields[:])
	if !ok || !s.end() || version != ManifestVersion {
		return Manifest{}, false
	}
	m.Version = ManifestVersion
	return m, true
}

var artifactFields = []string{"key", "sha256", "size"}

func (s *jsonScan) artifact(a *ArtifactDigest) bool {
	return s.object(func(name string) bool {
		switch name {
		case "key":
			return s.str(&a.Key)
		case "sha256":
			return s.str(&a.SHA256)
		case "size":
			return s.integer(&a.Size)
		}
		return false
	}, artifactFields)
}

var redactionFields = []string{"rule", "artifact", "path", "offset", "fingerprint", "omitted"}

func (s *jsonScan) redaction(r *Redaction) bool {
	return s.object(func(name string) bool {
		switch name {
		case "rule":
			return s.str(&r.Rule)
		case "artifact":
			return s.str(&r.Artifact)
		case "path":
			return s.str(&r.Path)
		case "offset":
			return s.integer(&r.Offset)
		case "fingerprint":
			return s.str(&r.Fingerprint)
		case "omitted":
			return s.integer(&r.Omitted)
		}
		return false
	}, redactionFields)
}

var signatureFields = []string{"algorithm", "key_id", "value"}

func (s *jsonScan) signature(sig *Signature) bool {
	return s.object(func(name string) bool {
		switch name {
		case "algorithm":
			return s.str(&sig.Algorithm)
		case "key_id":
			return s.str(&sig.KeyID)
		case "value":
			return s.str(&sig.Value)
		}
		return false
	}, signatureFields)
}

// jsonScan reads the narrow JSON decodeManifestFast accepts. Every method
// returns false, to decline, on anything outside it.
type jsonScan struct {
	data []byte
	i    int
}

// space skips JSON white space.
func (s *jsonScan) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// punct skips white space and then c, reporting whether c was there.
func (s *jsonScan) punct(c byte) bool {
	s.space()
	if s.i < len(s.data) && s.data[s.i] == c {
		s.i++
		return true
	}
	return false
}

// peek skips white space and reports whether c comes next.
func (s *jsonScan) peek(c byte) bool {
	s.space()
	return s.i < len(s.data) && s.data[s.i] == c
}

// end reports whether only white space is left.
func (s *jsonScan) end() bool {
	s.space()
	return s.i == len(s.data)
}

// object reads an object whose member names are among names, each at
// most once (at most 64 names), calling member after each name's colon
// to read its value.
func (s *jsonScan) object(member func(name string) bool, names []string) bool {
	if !s.punct('{') {
		return false
	}
	if s.punct('}') {
		return true
	}
	var seen uint64
	for {
		raw, ok := s.plain()
		if !ok || !s.punct(':') {
			return false
		}
		bit := -1
		for i, n := range names {
			if n == string(raw) {
				bit = i
				break
			}
		}
		if bit < 0 || seen&(1<<bit) != 0 || !member(names[bit]) {
			return false
		}
		seen |= 1 << bit
		if s.punct('}') {
			return true
		}
		if !s.punct(',') {
			return false
		}
	}
}

// array reads an array, calling elem to read each element.
func (s *jsonScan) array(elem func() bool) bool {
	if !s.punct('[') {
		return false
	}
	if s.punct(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.punct(']') {
			return true
		}
		if !s.punct(',') {
			return false
		}
	}
}

// plain reads a string without escapes or control characters whose bytes
// are valid UTF-8, and returns its content: what encoding/json decodes it
// to.
func (s *jsonScan) plain() ([]byte, bool) {
	if !s.punct('"') {
		return nil, false
	}
	start := s.i
	ascii := true
	for ; s.i < len(s.data); s.i++ {
		switch c := s.data[s.i]; {
		case c == '"':
			body := s.data[start:s.i]
			s.i++
			if !ascii && !utf8.Valid(body) {
				return nil, false
			}
			return body, true
		case c == '\\', c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, false
}

func (s *jsonScan) str(dst *string) bool {
	raw, ok := s.plain()
	if ok {
		*dst = string(raw)
	}
	return ok
}

// integer reads an integer of at most 18 digits, no leading zeros, no
// fraction or exponent: one that fits an int64 as it reads.
func (s *jsonScan) integer(dst *int64) bool {
	s.space()
	neg := s.i < len(s.data) && s.data[s.i] == '-'
	if neg {
		s.i++
	}
	start := s.i
	var n int64
	for s.i < len(s.data) && s.data[s.i] >= '0' && s.data[s.i] <= '9' {
		n = n*10 + int64(s.data[s.i]-'0')
		s.i++
	}
	digits := s.i - start
	if digits == 0 || digits > 18 || (digits > 1 && s.data[start] == '0') {
		return false
	}
	if s.i < len(s.data) {
		switch s.data[s.i] {
		case '.', 'e', 'E':
			return false
		}
	}
	if neg {
		n = -n
	}
	*dst = n
	return true
}

// timestamp reads a string as time.Time's UnmarshalJSON reads it, which is
// what encoding/json calls with the same bytes.
func (s *jsonScan) timestamp(dst *time.Time) bool {
	if !s.peek('"') {
		return false
	}
	start := s.i
	if _, ok := s.plain(); !ok {
		return false
	}
	return dst.UnmarshalJSON(s.data[start:s.i]) == nil
}

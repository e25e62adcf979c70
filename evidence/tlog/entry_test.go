package tlog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"
)

const (
	digestA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	digestB = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

func testClaim() Entry {
	return Entry{Kind: KindClaim, RequestID: "req-1", CanonicalRequestHash: "sha256:" + digestA,
		RequestSHA256: digestB, ReceivedAt: time.Date(2026, 11, 24, 3, 4, 5, 123400000, time.UTC),
		Gateway: "toolgate/1.2.0@gw-1"}
}

func testCompletion() Entry {
	return Entry{Kind: KindCompletion, RequestID: "req-1", ManifestSHA256: digestA,
		Outcome: "completed", KeyID: "ed25519:0123456789abcdef", Gateway: "toolgate/1.2.0@gw-1"}
}

const testApprovalID = "apr_abcdefghijklmnopqrstuvwxy4"

func testApproval() Entry {
	return Entry{Kind: KindApproval, RequestID: "req-1", ApprovalID: testApprovalID, ApprovalSHA256: digestB,
		Decision: "approve", Approver: "alice", DecidedAt: time.Date(2026, 11, 24, 4, 0, 0, 500000000, time.UTC),
		Gateway: "toolgate/1.2.0@gw-2"}
}

const testPeerOrigin = "toolgate.log/0123456789abcdef/gw-a"

func testWitnessEntry() Entry {
	return Entry{Kind: KindWitness, PeerOrigin: testPeerOrigin, PeerSize: 42, PeerRoot: Hash{1, 2, 3},
		Gateway: "toolgate/1.2.0@gw-b"}
}

func TestEntriesMarshalToTheDocumentedBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		entry Entry
		want  string
	}{
		{"a claim lists its fields in the fixed order", testClaim(),
			`{"v":1,"kind":"claim","request_id":"req-1","canonical_request_hash":"sha256:` + digestA +
				`","request_sha256":"` + digestB + `","received_at":"2026-11-24T03:04:05.1234Z","gateway":"toolgate/1.2.0@gw-1"}`},
		{"a signed completion carries its key id", testCompletion(),
			`{"v":1,"kind":"completion","request_id":"req-1","manifest_sha256":"` + digestA +
				`","outcome":"completed","key_id":"ed25519:0123456789abcdef","gateway":"toolgate/1.2.0@gw-1"}`},
		{"an unsigned completion omits the key id", func() Entry { e := testCompletion(); e.KeyID = ""; return e }(),
			`{"v":1,"kind":"completion","request_id":"req-1","manifest_sha256":"` + digestA +
				`","outcome":"completed","gateway":"toolgate/1.2.0@gw-1"}`},
		{"a claim received in another zone is written in UTC",
			func() Entry {
				e := testClaim()
				e.ReceivedAt = e.ReceivedAt.In(time.FixedZone("x", 3600))
				return e
			}(),
			`{"v":1,"kind":"claim","request_id":"req-1","canonical_request_hash":"sha256:` + digestA +
				`","request_sha256":"` + digestB + `","received_at":"2026-11-24T03:04:05.1234Z","gateway":"toolgate/1.2.0@gw-1"}`},
		{"an approval is version 2 and lists its fields in the fixed order", testApproval(),
			`{"v":2,"kind":"approval","request_id":"req-1","approval_id":"` + testApprovalID + `","approval_sha256":"` + digestB +
				`","decision":"approve","approver":"alice","decided_at":"2026-11-24T04:00:00.5Z","gateway":"toolgate/1.2.0@gw-2"}`},
		{"an expiry is logged with the gateway as its approver",
			func() Entry { e := testApproval(); e.Decision, e.Approver = "expired", "toolgate/1.2.0@gw-2"; return e }(),
			`{"v":2,"kind":"approval","request_id":"req-1","approval_id":"` + testApprovalID + `","approval_sha256":"` + digestB +
				`","decision":"expired","approver":"toolgate/1.2.0@gw-2","decided_at":"2026-11-24T04:00:00.5Z","gateway":"toolgate/1.2.0@gw-2"}`},
		{"a witness entry is version 3, names no request and carries the peer's checkpoint", testWitnessEntry(),
			`{"v":3,"kind":"witness","origin":"` + testPeerOrigin + `","size":42,"root":"AQIDAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","gateway":"toolgate/1.2.0@gw-b"}`},
		{"HTML characters and non-ASCII text are not escaped",
			func() Entry { e := testCompletion(); e.RequestID = `a<b>&"é"`; return e }(),
			`{"v":1,"kind":"completion","request_id":"a<b>&\"é\"","manifest_sha256":"` + digestA +
				`","outcome":"completed","key_id":"ed25519:0123456789abcdef","gateway":"toolgate/1.2.0@gw-1"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.entry.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("Marshal =\n%s\nwant\n%s", got, tc.want)
			}
			back, err := ParseEntry(got)
			if err != nil {
				t.Fatalf("ParseEntry of Marshal's output: %v", err)
			}
			if !back.ReceivedAt.Equal(tc.entry.ReceivedAt) || !back.DecidedAt.Equal(tc.entry.DecidedAt) {
				t.Fatalf("times %v, %v came back as %v, %v", tc.entry.ReceivedAt, tc.entry.DecidedAt, back.ReceivedAt, back.DecidedAt)
			}
			back.ReceivedAt, tc.entry.ReceivedAt = time.Time{}, time.Time{}
			back.DecidedAt, tc.entry.DecidedAt = time.Time{}, time.Time{}
			if back != tc.entry {
				t.Fatalf("ParseEntry = %+v, want %+v", back, tc.entry)
			}
		})
	}
}

func TestMarshalRefusesAnEntryThatIsNotWellFormed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(*Entry)
	}{
		{"the kind is unknown", func(e *Entry) { e.Kind = "deletion" }},
		{"the request id is empty", func(e *Entry) { e.RequestID = "" }},
		{"the request id is longer than 128 bytes", func(e *Entry) { e.RequestID = strings.Repeat("r", 129) }},
		{"the request id is not UTF-8", func(e *Entry) { e.RequestID = "r\xff" }},
		{"the request id has a newline", func(e *Entry) { e.RequestID = "r\n1" }},
		{"the gateway is empty", func(e *Entry) { e.Gateway = "" }},
		{"the gateway has a control character", func(e *Entry) { e.Gateway = "gw\x7f" }},
		{"the canonical hash lacks its sha256 prefix", func(e *Entry) { e.CanonicalRequestHash = digestA }},
		{"the canonical hash is upper case", func(e *Entry) { e.CanonicalRequestHash = "sha256:" + strings.ToUpper(digestA) }},
		{"the request digest is short", func(e *Entry) { e.RequestSHA256 = digestB[1:] }},
		{"the request digest is upper case", func(e *Entry) { e.RequestSHA256 = strings.ToUpper(digestB) }},
		{"the received time is unset", func(e *Entry) { e.ReceivedAt = time.Time{} }},
		{"the received time is past year 9999", func(e *Entry) { e.ReceivedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"a claim carries a manifest digest", func(e *Entry) { e.ManifestSHA256 = digestA }},
		{"a claim carries an outcome", func(e *Entry) { e.Outcome = "completed" }},
		{"a claim carries a key id", func(e *Entry) { e.KeyID = "ed25519:00" }},
		{"a claim carries an approval id", func(e *Entry) { e.ApprovalID = testApprovalID }},
		{"a claim carries an approval decision", func(e *Entry) { e.Decision = "approve" }},
		{"a claim carries a decision time", func(e *Entry) { e.DecidedAt = time.Now() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testClaim()
			tc.change(&e)
			if b, err := e.Marshal(); err == nil {
				t.Fatalf("Marshal accepted %+v as %s", e, b)
			} else if !strings.HasPrefix(err.Error(), "tlog: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		change func(*Entry)
	}{
		{"the outcome is unknown", func(e *Entry) { e.Outcome = "allowed" }},
		{"the manifest digest is missing", func(e *Entry) { e.ManifestSHA256 = "" }},
		{"the key id has a space", func(e *Entry) { e.KeyID = "ed25519: 00" }},
		{"the key id is upper case", func(e *Entry) { e.KeyID = "ED25519:00" }},
		{"a completion carries a received time", func(e *Entry) { e.ReceivedAt = time.Now() }},
		{"a completion carries a request digest", func(e *Entry) { e.RequestSHA256 = digestB }},
		{"a completion carries a canonical hash", func(e *Entry) { e.CanonicalRequestHash = "sha256:" + digestA }},
		{"a completion carries an approver", func(e *Entry) { e.Approver = "alice" }},
		{"a completion carries an approval digest", func(e *Entry) { e.ApprovalSHA256 = digestB }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testCompletion()
			tc.change(&e)
			if b, err := e.Marshal(); err == nil {
				t.Fatalf("Marshal accepted %+v as %s", e, b)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		change func(*Entry)
	}{
		{"the approval id lacks its prefix", func(e *Entry) { e.ApprovalID = testApprovalID[4:] }},
		{"the approval id is upper case", func(e *Entry) { e.ApprovalID = strings.ToUpper(testApprovalID) }},
		{"the approval id is one character short", func(e *Entry) { e.ApprovalID = testApprovalID[:len(testApprovalID)-1] }},
		{"the approval id has a base32 padding character", func(e *Entry) { e.ApprovalID = testApprovalID[:len(testApprovalID)-1] + "=" }},
		{"the approval digest is missing", func(e *Entry) { e.ApprovalSHA256 = "" }},
		{"the approval digest is upper case", func(e *Entry) { e.ApprovalSHA256 = strings.ToUpper(digestB) }},
		{"the decision is allow", func(e *Entry) { e.Decision = "allow" }},
		{"the decision is empty", func(e *Entry) { e.Decision = "" }},
		{"the approver is empty", func(e *Entry) { e.Approver = "" }},
		{"the approver is longer than 256 bytes", func(e *Entry) { e.Approver = strings.Repeat("a", MaxApproverLen+1) }},
		{"the approver has a newline", func(e *Entry) { e.Approver = "alice\nbob" }},
		{"the decision time is unset", func(e *Entry) { e.DecidedAt = time.Time{} }},
		{"an approval carries a received time", func(e *Entry) { e.ReceivedAt = time.Now() }},
		{"an approval carries a manifest digest", func(e *Entry) { e.ManifestSHA256 = digestA }},
		{"an approval carries a request digest", func(e *Entry) { e.RequestSHA256 = digestA }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testApproval()
			tc.change(&e)
			if b, err := e.Marshal(); err == nil {
				t.Fatalf("Marshal accepted %+v as %s", e, b)
			}
		})
	}
}

func TestMarshalRefusesAWitnessEntryThatIsNotWellFormed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(*Entry)
	}{
		{"the origin is empty", func(e *Entry) { e.PeerOrigin = "" }},
		{"the origin has a space", func(e *Entry) { e.PeerOrigin = "toolgate.log/x y" }},
		{"the origin has a plus", func(e *Entry) { e.PeerOrigin = "toolgate.log/x+y" }},
		{"the origin is longer than 256 bytes", func(e *Entry) { e.PeerOrigin = strings.Repeat("o", MaxOriginLen+1) }},
		{"the size is 0", func(e *Entry) { e.PeerSize = 0 }},
		{"the gateway is empty", func(e *Entry) { e.Gateway = "" }},
		{"a witness entry names a request", func(e *Entry) { e.RequestID = "req-1" }},
		{"a witness entry carries a manifest digest", func(e *Entry) { e.ManifestSHA256 = digestA }},
		{"a witness entry carries a received time", func(e *Entry) { e.ReceivedAt = time.Now() }},
		{"a witness entry carries an approver", func(e *Entry) { e.Approver = "alice" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testWitnessEntry()
			tc.change(&e)
			if b, err := e.Marshal(); err == nil {
				t.Fatalf("Marshal accepted %+v as %s", e, b)
			}
		})
	}
	for _, tc := range []struct {
		name  string
		entry Entry
	}{
		{"a completion carries a witnessed origin", func() Entry { e := testCompletion(); e.PeerOrigin = testPeerOrigin; return e }()},
		{"a claim carries a witnessed size", func() Entry { e := testClaim(); e.PeerSize = 1; return e }()},
		{"an approval carries a witnessed root", func() Entry { e := testApproval(); e.PeerRoot = Hash{1}; return e }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if b, err := tc.entry.Marshal(); err == nil {
				t.Fatalf("Marshal accepted %+v as %s", tc.entry, b)
			}
		})
	}
}

// A witness entry carries version 3 and exactly its own fields, so that
// a verifier from before peer witnesses refuses it by version, and no
// request's entry can pass for one.
func TestAWitnessEntryIsRefusedUnlessItIsExactlyOne(t *testing.T) {
	t.Parallel()
	w, err := testWitnessEntry().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s := string(w)
	for _, tc := range []struct{ name, data string }{
		{"version 1", strings.Replace(s, `"v":3`, `"v":1`, 1)},
		{"version 2", strings.Replace(s, `"v":3`, `"v":2`, 1)},
		{"a request id", strings.Replace(s, `"origin"`, `"request_id":"req-1","origin"`, 1)},
		{"a size with a leading zero", strings.Replace(s, `"size":42`, `"size":042`, 1)},
		{"a size written as a float", strings.Replace(s, `"size":42`, `"size":42.0`, 1)},
		{"a negative size", strings.Replace(s, `"size":42`, `"size":-42`, 1)},
		{"a size of 0", strings.Replace(s, `"size":42`, `"size":0`, 1)},
		{"a size past 2^64", strings.Replace(s, `"size":42`, `"size":18446744073709551616`, 1)},
		{"a root of 31 bytes", strings.Replace(s, `AQIDAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=`, `AQIDAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==`, 1)},
		{"a root without padding", strings.Replace(s, `AAAA=`, `AAAA`, 1)},
		{"a root in URL-safe base64", strings.Replace(s, `AQID`, `AQI-`, 1)},
		{"a root with a low bit set in its last character", strings.Replace(s, `AAAA=`, `AAAB=`, 1)},
		{"a root in hex", strings.Replace(s, `AQIDAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=`, strings.Repeat("0", 64), 1)},
		{"no root", strings.Replace(s, `"root":"AQIDAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",`, ``, 1)},
		{"the fields of a claim under the witness kind", strings.Replace(s, `"origin"`, `"received_at":"2026-11-24T03:04:05Z","origin"`, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.data == s {
				t.Fatal("the case did not change the entry")
			}
			if e, err := ParseEntry([]byte(tc.data)); !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseEntry(%q) = %+v, %v; want ErrMalformed", tc.data, e, err)
			}
		})
	}
	if WitnessEntryVersion == EntryVersion || WitnessEntryVersion == ApprovalEntryVersion {
		t.Fatal("WitnessEntryVersion is another kind's: an older verifier would not refuse it by version")
	}
}

// An approval entry carries version 2, and claims and completions keep
// version 1, so that logs written before approvals existed stay valid and
// a verifier that knows only version 1 refuses an approval loudly.
func TestAnApprovalEntryIsRefusedUnlessItCarriesVersionTwo(t *testing.T) {
	t.Parallel()
	approval, err := testApproval().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	completion, err := testCompletion().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, data string }{
		{"an approval entry claiming version 1", strings.Replace(string(approval), `"v":2`, `"v":1`, 1)},
		{"an approval entry claiming version 3", strings.Replace(string(approval), `"v":2`, `"v":3`, 1)},
		{"a completion entry claiming version 2", strings.Replace(string(completion), `"v":1`, `"v":2`, 1)},
		{"an approval entry with a completion's outcome", strings.Replace(string(approval), `"gateway"`, `"outcome":"completed","gateway"`, 1)},
		{"an approval entry with its decision time in another zone", strings.Replace(string(approval), `04:00:00.5Z`, `05:00:00.5+01:00`, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if e, err := ParseEntry([]byte(tc.data)); !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseEntry(%q) = %+v, %v; want ErrMalformed", tc.data, e, err)
			}
		})
	}
	if v := ApprovalEntryVersion; v == EntryVersion {
		t.Fatalf("ApprovalEntryVersion %d equals EntryVersion: an older verifier would not refuse it by version", v)
	}
}

func TestParseEntryRefusesBytesThatAreNotCanonical(t *testing.T) {
	t.Parallel()
	claim, err := testClaim().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	c := string(claim)
	for _, tc := range []struct{ name, data string }{
		{"a space after a colon", strings.Replace(c, `"v":1`, `"v": 1`, 1)},
		{"a trailing newline", c + "\n"},
		{"leading whitespace", " " + c},
		{"two fields swapped", strings.Replace(c, `"v":1,"kind":"claim"`, `"kind":"claim","v":1`, 1)},
		{"a duplicate request id", strings.Replace(c, `"request_id":"req-1"`, `"request_id":"req-1","request_id":"req-2"`, 1)},
		{"a duplicate request id, the canonical one last", strings.Replace(c, `"request_id":"req-1"`, `"request_id":"req-2","request_id":"req-1"`, 1)},
		{"an unknown field", strings.Replace(c, `"v":1`, `"v":1,"x":0`, 1)},
		{"a field name in another case", strings.Replace(c, `"request_id"`, `"Request_ID"`, 1)},
		{"a needless escape", strings.Replace(c, `req-1`, `\u0072eq-1`, 1)},
		{"a time with a +00:00 zone", strings.Replace(c, `05.1234Z`, `05.1234+00:00`, 1)},
		{"a time with a trailing zero", strings.Replace(c, `05.1234Z`, `05.12340Z`, 1)},
		{"a time in another zone", strings.Replace(c, `03:04:05.1234Z`, `04:04:05.1234+01:00`, 1)},
		{"version 2", strings.Replace(c, `"v":1`, `"v":2`, 1)},
		{"version 1.0", strings.Replace(c, `"v":1`, `"v":1.0`, 1)},
		{"a completion field set empty", strings.Replace(c, `"gateway"`, `"outcome":"","gateway"`, 1)},
		{"a missing field", strings.Replace(c, `"request_sha256":"`+digestB+`",`, ``, 1)},
		{"a JSON array", "[" + c + "]"},
		{"nothing", ""},
		{"null", "null"},
		{"invalid UTF-8 in a string", strings.Replace(c, `req-1`, "req-\xff", 1)},
		{"more than the size limit", strings.Replace(c, `req-1`, strings.Repeat("r", MaxEntrySize), 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.data == c {
				t.Fatal("the case did not change the entry")
			}
			if e, err := ParseEntry([]byte(tc.data)); !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseEntry(%q) = %+v, %v; want ErrMalformed", tc.data, e, err)
			}
		})
	}
}

func TestEveryFlippedBitOfAnEntryIsRefusedOrChangesIt(t *testing.T) {
	t.Parallel()
	for _, e := range []Entry{testClaim(), testCompletion(), testApproval(), testWitnessEntry()} {
		data, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		for i := range len(data) * 8 {
			flipped := bytes.Clone(data)
			flipped[i/8] ^= 1 << (i % 8)
			got, err := ParseEntry(flipped)
			if err != nil {
				continue
			}
			// A flip inside a free-text field can give another valid
			// entry; the leaf hash then differs, so the log catches it.
			again, _ := got.Marshal()
			if !bytes.Equal(again, flipped) || LeafHash(flipped) == LeafHash(data) {
				t.Fatalf("bit %d: %q parsed as %+v", i, flipped, got)
			}
		}
	}
}

func TestLeafHashIsTheRFC6962LeafHash(t *testing.T) {
	t.Parallel()
	entry := []byte(`{"v":1}`)
	want := sha256.Sum256(append([]byte{0}, entry...))
	if got := LeafHash(entry); got != want {
		t.Fatalf("LeafHash = %x, want SHA-256(0x00 || entry) = %x", got, want)
	}
}

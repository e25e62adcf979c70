package ownedid

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/ident"
)

// requestIDPattern is the rule every owned id must still satisfy.
const requestIDPattern = ident.RequestID

func TestAnOwnedIDIsItsCallersOnly(t *testing.T) {
	t.Parallel()
	agent := New("agent", "run:turn:0")
	for _, tc := range []struct {
		name, caller, id string
		want             error
	}{
		{"the owner", "agent", agent, nil},
		{"the owner, in upper case", "agent", strings.ToUpper(agent[:PrefixLen]) + agent[PrefixLen:], nil},
		{"another caller", "bob", agent, ErrNotOwner},
		{"another caller, in upper case", "bob", strings.ToUpper(agent), ErrNotOwner},
		{"a caller whose name extends the owner's", "agent2", agent, ErrNotOwner},
		{"the empty caller", "", agent, ErrNotOwner},
		{"an id that is not owned", "bob", "run:turn:0", nil},
		{"a marker without a tag", "bob", "o-run:turn:0", nil},
		{"a tag with a character outside base32", "bob", "o-abcdefghijklmn1:x", nil},
		{"a tag one character short", "bob", agent[:PrefixLen-2] + ":x", nil},
		{"the prefix alone", "bob", agent[:PrefixLen], ErrNotOwner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := Check(tc.caller, tc.id); !errors.Is(err, tc.want) {
				t.Fatalf("Check(%q, %q) = %v, want %v", tc.caller, tc.id, err, tc.want)
			}
		})
	}
}

func TestTheLongestAgentSpacesIDFits(t *testing.T) {
	t.Parallel()
	id := New(strings.Repeat("c", 1000), strings.Repeat("r", 64)+":"+strings.Repeat("t", 40)+":4095")
	if !requestIDPattern.MatchString(id) {
		t.Fatalf("%q (%d characters) is not a request id", id, len(id))
	}
	if local, ok := Local(id); !ok || !strings.HasPrefix(local, "rrr") {
		t.Fatalf("Local(%q) = %q, %v", id, local, ok)
	}
	if local, ok := Local("run:turn:0"); ok || local != "run:turn:0" {
		t.Fatalf("Local of an id that is not owned: %q, %v", local, ok)
	}
}

func FuzzCheck(f *testing.F) {
	for _, s := range []string{"", "o-", "run:turn:0", New("agent", "x"), "O-AAAAAAAAAAAAAAA:", "o-\xff\xfe"} {
		f.Add("agent", s)
	}
	f.Fuzz(func(t *testing.T, caller, id string) {
		err := Check(caller, id)
		local, ok := Local(id)
		if !ok && (err != nil || local != id) {
			t.Fatalf("an id that is not owned: Check %v, Local %q", err, local)
		}
		if ok && Prefix(caller)+local == id && err != nil {
			t.Fatalf("the owner refused its own id %q", id)
		}
		if Check(caller, New(caller, id)) != nil {
			t.Fatalf("New(%q, %q) is not the caller's", caller, id)
		}
	})
}

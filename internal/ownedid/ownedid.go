// Package ownedid makes request ids that belong to one caller.
//
// A front door that derives request ids from values other callers may
// know (an Agent Spaces run id and turn) would let any of them claim those
// ids first: the evidence store's request ids are one namespace, and the
// first claim wins. An owned id carries its caller's tag, a digest of the
// caller's name: "o-<tag>:<local>". The gateway refuses a request id whose
// tag is not its caller's, so another caller can neither meet such ids
// through the door (its own tag differs) nor claim them with a RunTool
// call of its own, and knowing one gives nothing to anyone but its owner.
package ownedid

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"strings"
)

const (
	// marker begins every owned id.
	marker = "o-"
	// tagLen is the tag's length in base32 characters: 75 bits of SHA-256,
	// so that finding another caller name with the same tag is out of
	// reach. It fits an Agent Spaces id at its longest (a 64-character run
	// id, a 40-character turn, a 4-digit index) in a 128-character
	// request id.
	tagLen = 15
	// PrefixLen is the length of an owned id's prefix: marker, tag, ':'.
	PrefixLen = len(marker) + tagLen + 1
)

// domain separates the tag's digest from any other use of SHA-256 over a
// caller's name.
const domain = "toolgate owned request id\x00"

var tagEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// ErrNotOwner is returned by Check for an id owned by another caller.
var ErrNotOwner = errors.New("request_id: ids beginning o-<tag>: belong to the caller whose tag they carry; use another request_id")

// Prefix is the prefix of caller's owned ids.
func Prefix(caller string) string {
	sum := sha256.Sum256([]byte(domain + caller))
	return marker + strings.ToLower(tagEncoding.EncodeToString(sum[:]))[:tagLen] + ":"
}

// New is caller's owned id for local.
func New(caller, local string) string { return Prefix(caller) + local }

// Local returns the part of an owned id after its prefix, and false for
// an id that is not owned (whose whole is then its own local part).
func Local(id string) (string, bool) {
	if !owned(id) {
		return id, false
	}
	return id[PrefixLen:], true
}

// Check returns ErrNotOwner when id is owned by a caller other than
// caller, and nil for caller's own ids and ids that are not owned. Case
// does not tell tags apart: a store on a case-insensitive file system
// would take "O-ABC…" for "o-abc…".
func Check(caller, id string) error {
	if owned(id) && !strings.EqualFold(id[:PrefixLen], Prefix(caller)) {
		return ErrNotOwner
	}
	return nil
}

// owned reports whether id has an owner's prefix: the marker, tagLen
// base32 characters in either case, ':'.
func owned(id string) bool {
	if len(id) < PrefixLen || !strings.EqualFold(id[:len(marker)], marker) || id[PrefixLen-1] != ':' {
		return false
	}
	for _, c := range id[len(marker) : PrefixLen-1] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// Package canonb64 decodes base64 that a gateway wrote and an attacker
// may have respelled: signatures, MACs and hashes read back from the
// store, a client or a peer.
//
// encoding/base64 accepts more than one spelling of the same bytes. Even
// in strict mode it skips '\r' and '\n' anywhere in the input, and out of
// it, it also ignores the unused low bits of the last character. A record
// respelled that way decodes to the same signature, so it still verifies
// while its bytes, and any hash taken of them, have changed. These
// decoders accept only the spelling the encoder itself produces.
package canonb64

import (
	"encoding/base64"
	"errors"
	"strings"
)

var errLineBreak = errors.New("canonb64: a line break inside base64")

// Std decodes s as standard padded base64 (RFC 4648 §4) in its one
// canonical spelling.
func Std(s string) ([]byte, error) { return decode(base64.StdEncoding, s) }

// RawURL decodes s as unpadded base64url (RFC 4648 §5, as JWS and our
// MACs use it) in its one canonical spelling.
func RawURL(s string) ([]byte, error) { return decode(base64.RawURLEncoding, s) }

// decode relies on what strict mode leaves: with line breaks refused and
// the spare bits required to be zero (and, for padded encodings, the
// padding required), every other byte of s is checked, so s is the one
// encoding of the result.
func decode(enc *base64.Encoding, s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errLineBreak
	}
	return enc.Strict().DecodeString(s)
}

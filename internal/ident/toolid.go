package ident

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxToolIDBytes bounds a tool id, whether a tools.<id> key of the
// configuration or the tool_id of a call.
const MaxToolIDBytes = 256

// ValidateToolID applies the tool id rules: non-empty, bounded, printable,
// no white space.
func ValidateToolID(id string) error {
	if id == "" {
		return fmt.Errorf("must not be empty")
	}
	if err := ValidatePrintable(id, MaxToolIDBytes); err != nil {
		return err
	}
	for _, r := range id {
		if unicode.IsSpace(r) {
			return fmt.Errorf("must not contain white space")
		}
	}
	return nil
}

// ValidatePrintable checks that s is at most maxBytes of valid UTF-8 with
// no character that is not printable (the space aside): a request field
// that ends up in evidence, logs or a terminal carries no control
// characters.
func ValidatePrintable(s string, maxBytes int) error {
	if len(s) > maxBytes {
		return fmt.Errorf("%d bytes, the limit is %d", len(s), maxBytes)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("must be valid UTF-8")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			return fmt.Errorf("must contain only printable characters (found %U)", r)
		}
	}
	return nil
}

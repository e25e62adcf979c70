package tpmjs

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits of the validated request fields.
const (
	maxPackageNameLen = 214 // npm's own limit
	maxVersionLen     = 256
	maxDistTagLen     = 128
	maxExportNameLen  = 255
	maxNumericDigits  = 16 // keeps a version number within JavaScript's safe integers
)

// ValidatePackageName reports whether s is an npm package name the driver
// may forward: at most 214 characters, lowercase, either "name" or
// "@scope/name", each part made of a-z, 0-9, ".", "_" and "-" and starting
// with a letter or digit, and not one of npm's reserved names.
//
// The rules are stricter than npm's (which also admits "~", "!", "*", "'",
// "(" and ")" in legacy names) because executors paste the name into shell
// commands and import URLs: every accepted name is inert in both, and none
// can start with "-" and be read as a command-line option.
func ValidatePackageName(s string) error {
	if s == "" {
		return errors.New("package name is empty")
	}
	if len(s) > maxPackageNameLen {
		return fmt.Errorf("package name %s is longer than %d characters", clip(s), maxPackageNameLen)
	}
	name := s
	if strings.HasPrefix(s, "@") {
		scope, rest, ok := strings.Cut(s[1:], "/")
		if !ok {
			return fmt.Errorf("package name %s: a scoped name must have the form @scope/name", clip(s))
		}
		if err := checkNamePart(s, "scope", scope); err != nil {
			return err
		}
		name = rest
	}
	if err := checkNamePart(s, "name", name); err != nil {
		return err
	}
	if name == "node_modules" || name == "favicon.ico" {
		return fmt.Errorf("package name %s: %q is reserved by npm", clip(s), name)
	}
	return nil
}

// checkNamePart checks the scope or the name part of a package name.
func checkNamePart(full, what, part string) error {
	if part == "" {
		return fmt.Errorf("package name %s: the %s is empty", clip(full), what)
	}
	for i := 0; i < len(part); i++ {
		c := part[i]
		switch {
		case 'A' <= c && c <= 'Z':
			return fmt.Errorf("package name %s: uppercase letters are not allowed", clip(full))
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == '-':
			if i == 0 {
				return fmt.Errorf("package name %s: the %s must not start with %q", clip(full), what, c)
			}
		default:
			return fmt.Errorf("package name %s: character %s is not allowed", clip(full), charAt(part, i))
		}
	}
	return nil
}

// ValidateVersion reports whether s is a version specifier the driver may
// forward: an exact semantic version, a caret, tilde or x-range of one
// version, or a dist-tag.
//
// Executors paste the version unquoted into a shell command, so the
// grammar admits only characters a POSIX shell takes literally inside a
// word:
//
//	version    = [ op ] partial | dist-tag
//	op         = "^" | "~" | "="
//	partial    = [ "v" ] xr [ "." xr [ "." xr ] ] [ "-" pre ] [ "+" build ]
//	xr         = "x" | "X" | "0" | [1-9] *15[0-9]
//	pre        = ident *( "." ident )       ; only after three numbers
//	build      = alnum *( "." alnum )       ; only after three numbers
//	ident      = "0" | [1-9] *[0-9] | alnum with at least one letter or "-"
//	alnum      = 1*[0-9A-Za-z-]
//	dist-tag   = [a-z] *[a-z0-9._-]         ; at most 128 characters
//
// at most 256 characters in all. Comparator ranges (">=1.2.0 <2.0.0"),
// unions ("1.x || 2.x"), hyphen ranges and the "*" wildcard are refused:
// pasted into a shell, "<" and ">" redirect (">=0.1.0" creates a file, "<1.0.0"
// reads one), "||" runs what follows as a command, a space starts a new
// word that npm installs as another package, and "*" is a glob. "^1.2.0"
// and "~1.2" say what most such ranges mean, "1.x" replaces "1.*", and an
// exact version or a dist-tag pins the rest.
//
// An accepted specifier therefore consists of ASCII letters, digits and
// ". - + _ = ~ ^" only (safeVersionByte), and never starts with "-".
func ValidateVersion(s string) error {
	if s == "" {
		return errors.New("version is empty")
	}
	if len(s) > maxVersionLen {
		return fmt.Errorf("version %s is longer than %d characters", clip(s), maxVersionLen)
	}
	for i := 0; i < len(s); i++ {
		if !safeVersionByte(s[i]) {
			return fmt.Errorf("version %s: character %s is not allowed%s", clip(s), charAt(s, i), rangeHint(s[i]))
		}
	}
	specErr := checkSpecifier(s)
	if specErr == nil {
		return nil
	}
	tagErr := checkDistTag(s)
	if tagErr == nil {
		return nil
	}
	// Report the error of the reading the specifier most looks like: a
	// word that starts with a letter and holds no operator is meant as a
	// dist-tag.
	if c := s[0]; ('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') && c != 'v' && c != 'x' &&
		!strings.ContainsAny(s, "=~^") {
		return fmt.Errorf("version %s: %w", clip(s), tagErr)
	}
	return fmt.Errorf("version %s: %w", clip(s), specErr)
}

// safeVersionByte reports whether c may appear anywhere in a version
// specifier: a byte a shell takes literally inside a word.
func safeVersionByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte(".-+_=~^", c) >= 0
}

// rangeHint says what to write instead of a range character the grammar
// refuses.
func rangeHint(c byte) string {
	switch c {
	case '<', '>', '|', ' ':
		return ` (comparator ranges and unions reach the executor's shell as redirections, pipes and extra words; use an exact version, "^1.2.0", "~1.2" or "1.x")`
	case '*':
		return ` (a glob to the executor's shell; use "x", as in "1.x")`
	}
	return ""
}

// checkSpecifier checks s against the "[ op ] partial" rule.
func checkSpecifier(s string) error {
	if op := s[0]; op == '^' || op == '~' || op == '=' {
		s = s[1:]
	}
	return checkPartial(s)
}

// checkDistTag checks s against the dist-tag rule.
func checkDistTag(s string) error {
	if len(s) > maxDistTagLen {
		return fmt.Errorf("a dist-tag is at most %d characters", maxDistTagLen)
	}
	if c := s[0]; c < 'a' || c > 'z' {
		return errors.New("a dist-tag starts with a lowercase letter")
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("a dist-tag consists of a-z, 0-9, \".\", \"_\" and \"-\"; found %q", c)
		}
	}
	return nil
}

// checkPartial checks a possibly partial version such as "1", "1.x",
// "v1.2.3" or "1.2.3-beta.1+build.5".
func checkPartial(p string) error {
	p = strings.TrimPrefix(p, "v")
	if p == "" {
		return errors.New("missing version number")
	}
	core, build, hasBuild := strings.Cut(p, "+")
	core, pre, hasPre := strings.Cut(core, "-")
	parts := strings.Split(core, ".")
	if len(parts) > 3 {
		return errors.New("more than three version numbers")
	}
	allNumeric := true
	for _, part := range parts {
		numeric, err := checkXR(part)
		if err != nil {
			return err
		}
		allNumeric = allNumeric && numeric
	}
	if (hasPre || hasBuild) && (len(parts) != 3 || !allNumeric) {
		return errors.New("a prerelease or build suffix needs a full version such as 1.2.3")
	}
	if hasPre {
		for _, id := range strings.Split(pre, ".") {
			if err := checkIdent(id, true); err != nil {
				return fmt.Errorf("prerelease: %w", err)
			}
		}
	}
	if hasBuild {
		for _, id := range strings.Split(build, ".") {
			if err := checkIdent(id, false); err != nil {
				return fmt.Errorf("build metadata: %w", err)
			}
		}
	}
	return nil
}

// checkXR checks one version number or wildcard and reports whether it was
// a number.
func checkXR(s string) (numeric bool, err error) {
	switch s {
	case "":
		return false, errors.New("empty version number")
	case "x", "X":
		return false, nil
	}
	if len(s) > maxNumericDigits {
		return false, fmt.Errorf("version number %q has more than %d digits", s, maxNumericDigits)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false, fmt.Errorf("version number %q is not a number or x", s)
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return false, fmt.Errorf("version number %q has a leading zero", s)
	}
	return true, nil
}

// checkIdent checks one dot-separated identifier of a prerelease or build
// suffix. Numeric prerelease identifiers must not have leading zeros.
func checkIdent(id string, prerelease bool) error {
	if id == "" {
		return errors.New("empty identifier")
	}
	numeric := true
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case '0' <= c && c <= '9':
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '-':
			numeric = false
		default:
			return fmt.Errorf("identifier %q: character %q is not allowed", id, c)
		}
	}
	if prerelease && numeric && len(id) > 1 && id[0] == '0' {
		return fmt.Errorf("identifier %q has a leading zero", id)
	}
	return nil
}

// ValidateExportName reports whether s is a JavaScript identifier that is
// not a reserved word: ASCII letters, digits, "_" and "$", not starting with
// a digit, at most 255 characters.
//
// Executors resolve the tool as pkg[name] and paste the name into generated
// code and messages; an ASCII identifier is inert there, and the words that
// name JavaScript's own machinery ("__proto__", "constructor", "prototype")
// are refused as well because they resolve to the object model rather than
// to an export.
func ValidateExportName(s string) error {
	if s == "" {
		return errors.New("export name is empty")
	}
	if len(s) > maxExportNameLen {
		return fmt.Errorf("export name %s is longer than %d characters", clip(s), maxExportNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '_', c == '$':
		case '0' <= c && c <= '9':
			if i == 0 {
				return fmt.Errorf("export name %s must not start with a digit", clip(s))
			}
		default:
			return fmt.Errorf("export name %s: character %s is not allowed in a JavaScript identifier", clip(s), charAt(s, i))
		}
	}
	if reservedWord(s) {
		return fmt.Errorf("export name %s is a reserved word", clip(s))
	}
	return nil
}

// reservedWord reports whether s is a JavaScript reserved word (including
// the strict-mode and module ones and the literals) or one of the property
// names of the object model.
func reservedWord(s string) bool {
	switch s {
	case "await", "break", "case", "catch", "class", "const", "continue", "debugger",
		"default", "delete", "do", "else", "enum", "export", "extends", "false",
		"finally", "for", "function", "if", "implements", "import", "in",
		"instanceof", "interface", "let", "new", "null", "package", "private",
		"protected", "public", "return", "static", "super", "switch", "this",
		"throw", "true", "try", "typeof", "var", "void", "while", "with", "yield",
		"__proto__", "constructor", "prototype":
		return true
	}
	return false
}

// charAt quotes the character that starts at byte i of s for an error
// message, or names the byte when it starts no valid UTF-8 sequence.
func charAt(s string, i int) string {
	r, size := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf("byte 0x%02x", s[i])
	}
	return fmt.Sprintf("%q", r)
}

// clip quotes s for an error message, shortened to at most 64 bytes so that
// a huge or hostile value cannot flood a log line.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q…", s[:limit])
}

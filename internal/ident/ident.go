// Package ident declares, once, the forms of the identifiers Toolgate
// accepts from configuration and from callers: environment variable names,
// caller names, request ids, driver names and the short lower-case names of
// kinds, front doors and identity methods.
//
// Each form is given twice on purpose: as a regular expression (Pattern
// constants, quoted in error messages and JSON Schemas, so that what a user
// reads is the rule) and as a byte-by-byte check (the functions, which
// allocate nothing and cannot be made slow by hostile input). The fuzz
// target holds the two to agreement.
package ident

// Patterns of the identifier forms, as RE2 expressions anchored at both
// ends.
const (
	// EnvNamePattern is an environment variable name, as a *_env key or a
	// caller-supplied env map names it. The same form can follow a '.' in
	// a JSON path.
	EnvNamePattern = `^[A-Za-z_][A-Za-z0-9_]*$`
	// CallerNamePattern is a caller name: auth.keys' callers and those a
	// front door derives from a token, which Cedar sees as
	// Caller::"<name>" and evidence records.
	CallerNamePattern = `^[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}$`
	// RequestIDPattern is a request id. It keeps the id inside its
	// evidence prefix: no slash, no leading dot, nothing a path could be
	// built from.
	RequestIDPattern = `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`
	// DriverNamePattern is a drivers.<name> key; it prefixes the ids of
	// the tools the driver publishes.
	DriverNamePattern = `^[a-z][a-z0-9_-]{0,63}$`
	// WordPattern is a short lower-case name that may name log fields and
	// folders: a driver kind's type, a front door's name, an identity
	// method. No quote, slash, dot or space can get through.
	WordPattern = `^[a-z][a-z0-9_]{0,31}$`
)

// Form is one identifier form. Its methods have the shape of a
// *regexp.Regexp's, so a Form can stand where a compiled pattern stood, and
// it is a constant, so no package holds a mutable copy of a rule.
type Form uint8

// The identifier forms; each matches its Pattern constant.
const (
	EnvName Form = iota + 1
	CallerName
	RequestID
	DriverName
	Word
)

// rule is how a Form is checked.
type rule struct {
	pattern     string
	first, rest func(byte) bool
	max         int
}

// rule returns f's rule; a Form outside the constants matches nothing.
func (f Form) rule() rule {
	switch f {
	case EnvName:
		return rule{EnvNamePattern, isEnvStart, isEnvByte, 1 << 30}
	case CallerName:
		return rule{CallerNamePattern, isAlnum, isCallerByte, 128}
	case RequestID:
		return rule{RequestIDPattern, isAlnum, isRequestIDByte, 128}
	case DriverName:
		return rule{DriverNamePattern, isLower, isDriverByte, 64}
	case Word:
		return rule{WordPattern, isLower, isWordByte, 32}
	}
	return rule{pattern: "^$(?:.)", max: -1}
}

// MatchString reports whether s has the form.
func (f Form) MatchString(s string) bool { return match(s, f.rule()) }

// Match reports whether b has the form.
func (f Form) Match(b []byte) bool { return match(b, f.rule()) }

// String returns the form's pattern, for error messages.
func (f Form) String() string { return f.rule().pattern }

// match reports whether s is 1 to r.max bytes long, its first byte passes
// r.first and every later byte passes r.rest.
func match[T string | []byte](s T, r rule) bool {
	if len(s) == 0 || len(s) > r.max || !r.first(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !r.rest(s[i]) {
			return false
		}
	}
	return true
}

func isLower(c byte) bool { return 'a' <= c && c <= 'z' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isAlnum(c byte) bool { return isLower(c) || 'A' <= c && c <= 'Z' || isDigit(c) }

func isEnvStart(c byte) bool { return c == '_' || isLower(c) || 'A' <= c && c <= 'Z' }

func isEnvByte(c byte) bool { return isEnvStart(c) || isDigit(c) }

func isCallerByte(c byte) bool {
	return isAlnum(c) || c == '.' || c == '_' || c == '@' || c == ':' || c == '-'
}

func isRequestIDByte(c byte) bool {
	return isAlnum(c) || c == '.' || c == '_' || c == ':' || c == '-'
}

func isDriverByte(c byte) bool { return isLower(c) || isDigit(c) || c == '_' || c == '-' }

func isWordByte(c byte) bool { return isLower(c) || isDigit(c) || c == '_' }

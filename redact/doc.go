// Package redact removes secrets from the evidence the gateway writes: JSON artifacts
// ([Redactor.JSON]), text ([Redactor.Text]) and streams too large to hold ([Redactor.Copy]).
//
// # Marker
//
// A secret is replaced by the marker
//
//	[REDACTED:<rule>]
//
// and only the secret itself is replaced, so the text around it stays readable: in
// "Authorization: Bearer abc…" only the credential goes, in "https://user:pw@host" only "pw".
// Overlapping secrets merge into one marker, named by the longest (a specific rule before a
// generic one among equals). Markers already in the input are never redacted again, and the
// output is a fixed point: redacting it again changes nothing.
//
// # Rules
//
// Pattern rules come in the gitleaks format (id, regex, secretGroup, entropy, keywords,
// allowlists): gitleaks' maintained default set, read from its Go module; Toolgate's own
// (toolgate.toml in this package: connection strings, URL passwords, Authorization credentials,
// secret assignments, command-line secrets, …); and a team's file ([Config.RulesFile]), where a
// rule with an existing id replaces it. [Config.DisableRules] switches rules off. Every rule
// needs keywords, and each match must contain one: a rule runs only near its keywords.
//
// Besides patterns:
//
//   - secret-key-name: the value under a JSON key that names a secret. Keys are compared after
//     lower-casing and removing '_', '-', '.' and spaces, and match when they end with password,
//     passwd, secret, token, apikey, authorization, cookie, privatekey, clientsecret, accesskey,
//     secretkey, sessionid or credentials (or one of [Config.KeyNames]); githubToken and
//     x-api-key match, max_tokens does not. Strings and numbers become the marker; booleans,
//     null and empty strings stay; objects and arrays keep their shape with every string and
//     number inside replaced. The same holds for values secret by structure (see structure.go).
//   - known-secret: an exact value the gateway holds ([Config.KnownSecrets],
//     [Redactor.WithSecrets]) in any of its encodings, anywhere: as is; JSON-escaped (also with
//     `\/` and twice, as JSON text inside a JSON string); percent-encoded (query, path or every
//     byte, hex digits in either case); hex (either case); base64 and base64url at any
//     alignment inside a longer encoding; and hex or base64 line-wrapped at 60, 64 or 76
//     columns with \n or \r\n (xxd -p, base64, PEM, MIME); reversed; and any run of at least
//     half of it, 12 bytes at least (see partial.go). A number holding one becomes the marker
//     string.
//   - caller-secret: a value a caller chose ([Redactor.Standalone]), replaced only where it
//     stands alone, and only in what that redactor is applied to (tool output). Values must
//     pass [CheckCallerSecret]: at least 8 bytes and not a common word.
//
// Base64 blobs are decoded and searched with all of the above, and what is found there is
// redacted in the encoding (see encoded.go).
//
// # Engine
//
// One Aho-Corasick pass over the input finds every keyword and known value; input without any
// costs nothing more. Each rule with a keyword hit then runs with Go's linear-time regexp,
// anchored at each hit when every match starts with a keyword, otherwise in windows around the
// hits. See optimize.go for the rewrites that keep gitleaks' patterns fast.
//
// # Report
//
// A [Finding] records rule, artifact, JSON path or offset, and a keyed HMAC-SHA256 fingerprint of
// the secret ([Config.FingerprintKey]) — never the secret or a part of it. Paths are built from
// redacted key names.
package redact

// Package redact removes secrets from the JSON artifacts the gateway writes as evidence.
//
// Every artifact (the request, the policy decision, the tool result, the response) passes through
// a [Redactor] before it is stored, and the caller's reply is decoded from the redacted bytes, so
// the redactor always emits valid JSON with the structure of its input: object keys sorted,
// numbers exactly as written, two-space indentation, no HTML escaping, a trailing newline.
//
// # Marker
//
// A secret is replaced by the marker
//
//	[REDACTED:<rule>]
//
// and only the secret itself is replaced, so the text around it stays readable: in
// "Authorization: Bearer abc…" only the credential goes, in "https://user:pw@host" only "pw".
// Matches that overlap are merged into one marker labelled by the longest of them.
//
// # Rules
//
// Rule ids, as they appear in markers and in each [Finding]:
//
//   - secret-key-name: the value under a JSON key that names a secret. Keys are compared after
//     lower-casing and removing '_', '-', '.' and spaces, and match when they end with password,
//     passwd, secret, token, apikey, authorization, cookie, privatekey, clientsecret, accesskey,
//     secretkey, sessionid or credentials (or one of [Config.KeyNames]). "Ends with" is
//     deliberate: githubToken and x-api-key match, max_tokens and token_count do not. Strings and
//     numbers become the marker, booleans, null and empty strings stay, and objects and arrays
//     keep their shape with every string and number inside replaced.
//   - known-secret: an exact configured value ([Config.KnownSecrets], [Redactor.WithSecrets])
//     anywhere in a string or key, or inside a number literal (the number then becomes the
//     marker string). Values shorter than four bytes are ignored.
//   - private-key: a PEM "-----BEGIN … PRIVATE KEY-----" block up to its END line, or to the end
//     of the string when the END line is missing.
//   - anthropic-api-key: sk-ant-….
//   - openai-api-key: sk-…, sk-proj-….
//   - github-token: ghp_, gho_, ghu_, ghs_, ghr_ tokens and github_pat_ tokens.
//   - slack-token: xoxb-, xoxp-, xoxa-, xoxr-, xoxs- tokens and the secret path of a
//     hooks.slack.com webhook URL.
//   - stripe-key: sk_live_, sk_test_, rk_live_, rk_test_ keys.
//   - google-api-key: AIza followed by 35 characters.
//   - aws-access-key-id: AKIA, ASIA, ABIA, ACCA followed by 16 base32 characters.
//   - aws-secret-access-key: a 40-character key right after a secret keyword such as
//     aws_secret_access_key= or "SecretAccessKey": ".
//   - jwt: eyJ….eyJ….signature.
//   - url-password: the password in scheme://user:password@host.
//   - bearer-credential, basic-credential: the credential after "Bearer" or "Basic", as in
//     Authorization headers and curl -H lines.
//
// Patterns apply to every string value and object key. If redacting two keys of one object gives
// the same name, the later key (in sorted order of the original keys) gets "#2", "#3", … appended.
//
// A [Finding] records the rule, artifact, JSON path and offset of each redaction and never any
// part of the secret; paths are built from the redacted key names.
package redact

package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// label is one secret occurrence in a positive file: Secret is the exact byte sequence that must
// be gone from File after redaction.
type label struct {
	File   string `json:"file"`
	Kind   string `json:"kind"`
	Secret string `json:"secret"`
}

// expander fills the «…» markers of positive file templates. A marker is
//
//	«name[:arg…][#ref][|modifier…]»
//
// where name is a secret generator (the value is recorded as a label) or a filler such as uuid,
// hex:N or ts:iso (unlabelled). Markers with the same name and #ref expand to the same value,
// for a token that a file shows twice. Modifiers rewrite the value the way the surrounding
// format stores it, and the label records the rewritten bytes:
//
//	json       escape for a JSON string (a PEM block's newlines become \n)
//	indent:N   indent every line after the first by N spaces (YAML block scalars, heredocs)
//	b64        standard base64 (Kubernetes Secret data, Docker auth)
type expander struct {
	file   string
	r      *rand.Rand
	gens   map[string]secretGen
	refs   map[string][2]string
	clock  time.Time
	labels []label
	err    error
}

func newExpander(file string, r *rand.Rand, gens map[string]secretGen) *expander {
	start := time.Date(2025, time.January, 6, 8, 0, 0, 0, time.UTC)
	start = start.Add(time.Duration(r.IntN(300*24)) * time.Hour).Add(time.Duration(r.IntN(3600)) * time.Second)
	return &expander{file: file, r: r, gens: gens, refs: map[string][2]string{}, clock: start}
}

// expand returns tmpl with its markers filled. The first error is kept in x.err, and a caller
// that finds it set discards the output.
func (x *expander) expand(tmpl string) string {
	var b strings.Builder
	for {
		i := strings.Index(tmpl, "«")
		if i < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		j := strings.Index(tmpl[i:], "»")
		if j < 0 {
			x.fail(fmt.Errorf("unterminated marker %.30q", tmpl[i:]))
			return b.String()
		}
		b.WriteString(tmpl[:i])
		b.WriteString(x.marker(tmpl[i+len("«") : i+j]))
		tmpl = tmpl[i+j+len("»"):]
	}
}

func (x *expander) fail(err error) {
	if x.err == nil {
		x.err = fmt.Errorf("%s: %w", x.file, err)
	}
}

// marker expands the inside of one marker.
func (x *expander) marker(spec string) string {
	mods := strings.Split(spec, "|")
	head, ref, _ := strings.Cut(mods[0], "#")
	args := strings.Split(head, ":")
	name := args[0]

	key := head + "#" + ref
	val, ok := x.refs[key]
	if !ok || ref == "" {
		var err error
		val, err = x.value(name, args[1:])
		if err != nil {
			x.fail(err)
			return ""
		}
		if ref != "" {
			x.refs[key] = val
		}
	}
	text, secret := val[0], val[1]
	for _, m := range mods[1:] {
		var err error
		if text, secret, err = modify(m, text, secret); err != nil {
			x.fail(err)
			return ""
		}
	}
	if g, ok := x.gens[name]; ok {
		if secret == "" || !strings.Contains(text, secret) {
			x.fail(fmt.Errorf("generator %s produced an empty or detached secret", name))
			return ""
		}
		x.labels = append(x.labels, label{File: x.file, Kind: g.kind, Secret: secret})
	}
	return text
}

// value produces a fresh value for a secret generator or a filler. Fillers have no secret.
func (x *expander) value(name string, args []string) ([2]string, error) {
	if g, ok := x.gens[name]; ok {
		text, secret := g.gen(x.r)
		return [2]string{text, secret}, nil
	}
	s, err := x.filler(name, args)
	return [2]string{s, ""}, err
}

// filler returns non-secret random text: identifiers, digests, timestamps, addresses.
func (x *expander) filler(name string, args []string) (string, error) {
	r := x.r
	argInt := func(i int) (int, error) {
		if i >= len(args) {
			return 0, fmt.Errorf("filler %s needs %d arguments", name, i+1)
		}
		return strconv.Atoi(args[i])
	}
	switch name {
	case "uuid":
		return uuid(r), nil
	case "hex", "alnum", "upper", "lower", "digits", "b32":
		n, err := argInt(0)
		if err != nil {
			return "", err
		}
		alphabet := map[string]string{"hex": hexDigits, "alnum": alnum, "upper": upperAlnum, "lower": lowerAlnum, "digits": digits, "b32": base32Upper}[name]
		return chars(r, alphabet, n), nil
	case "num":
		lo, err := argInt(0)
		if err != nil {
			return "", err
		}
		hi, err := argInt(1)
		if err != nil {
			return "", err
		}
		return strconv.Itoa(lo + r.IntN(hi-lo+1)), nil
	case "pick":
		if len(args) == 0 {
			return "", errors.New("filler pick needs choices")
		}
		// Choices are comma-separated; "\," is a comma inside a choice.
		joined := strings.ReplaceAll(strings.Join(args, ":"), `\,`, "\x00")
		choices := strings.Split(joined, ",")
		return strings.ReplaceAll(oneOf(r, choices...), "\x00", ","), nil
	case "b64", "b64raw":
		n, err := argInt(0)
		if err != nil {
			return "", err
		}
		if name == "b64raw" {
			return base64.RawStdEncoding.EncodeToString(randBytes(r, n)), nil
		}
		return base64.StdEncoding.EncodeToString(randBytes(r, n)), nil
	case "ssh-rsa-pub":
		return sshPublicKey("ssh-rsa", r), nil
	case "ssh-ed25519-pub":
		return sshPublicKey("ssh-ed25519", r), nil
	case "cert":
		return certificate(r), nil
	case "cert-b64":
		return base64.StdEncoding.EncodeToString([]byte(certificate(r) + "\n")), nil
	case "ip":
		return fmt.Sprintf("10.%d.%d.%d", r.IntN(256), r.IntN(256), 2+r.IntN(250)), nil
	case "pubip":
		return fmt.Sprintf("%d.%d.%d.%d", [3]int{34, 52, 185}[r.IntN(3)], r.IntN(256), r.IntN(256), 2+r.IntN(250)), nil
	case "ts":
		return x.timestamp(strings.Join(args, ":"))
	}
	return "", fmt.Errorf("unknown marker %q", name)
}

// timestamp advances the file's clock by up to a few seconds and formats it.
func (x *expander) timestamp(format string) (string, error) {
	x.clock = x.clock.Add(time.Duration(1+x.r.IntN(2500)) * time.Millisecond)
	t := x.clock
	switch format {
	case "", "iso":
		return t.Format("2006-01-02T15:04:05.000Z"), nil
	case "sec":
		return t.Format("2006-01-02T15:04:05Z"), nil
	case "gha":
		// GitHub Actions prints seven fractional digits.
		return fmt.Sprintf("%s%04dZ", t.Format("2006-01-02T15:04:05.000"), x.r.IntN(10000)), nil
	case "micro":
		return t.Format("2006-01-02T15:04:05.000000Z"), nil
	case "py":
		return t.Format("2006-01-02 15:04:05,000"), nil
	case "go":
		return t.Format("2006/01/02 15:04:05"), nil
	case "clf":
		return t.Format("02/Jan/2006:15:04:05 -0700"), nil
	case "http":
		return t.Format(time.RFC1123), nil
	case "unix":
		return strconv.FormatInt(t.Unix(), 10), nil
	case "date":
		return t.Format("2006-01-02"), nil
	}
	return "", fmt.Errorf("unknown timestamp format %q", format)
}

// modify applies one modifier to a value and its secret.
func modify(mod, text, secret string) (string, string, error) {
	name, arg, _ := strings.Cut(mod, ":")
	switch name {
	case "json":
		return jsonEscape(text), jsonEscape(secret), nil
	case "indent":
		n, err := strconv.Atoi(arg)
		if err != nil {
			return "", "", fmt.Errorf("indent modifier: %w", err)
		}
		pad := "\n" + strings.Repeat(" ", n)
		return strings.ReplaceAll(text, "\n", pad), strings.ReplaceAll(secret, "\n", pad), nil
	case "b64":
		if text != secret && secret != "" {
			return "", "", errors.New("b64 modifier on a value whose secret is only part of it")
		}
		enc := base64.StdEncoding.EncodeToString([]byte(text))
		if secret == "" {
			return enc, "", nil
		}
		return enc, enc, nil
	}
	return "", "", fmt.Errorf("unknown modifier %q", mod)
}

// jsonEscape escapes s for the inside of a JSON string literal.
func jsonEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s)
}

// positiveFile is one file of positive/: its path under the corpus and a function that renders
// it through an expander, which records the labels.
type positiveFile struct {
	path  string
	build func(x *expander) string
}

// tmpl renders a fixed template.
func tmpl(s string) func(x *expander) string {
	return func(x *expander) string { return x.expand(s) }
}

// lines renders n lines, each from a template picked at random.
func (x *expander) lines(n int, templates ...string) string {
	var b strings.Builder
	for range n {
		b.WriteString(x.expand(templates[x.r.IntN(len(templates))]))
		b.WriteByte('\n')
	}
	return b.String()
}

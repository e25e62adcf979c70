package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// committed is the checked-in corpus, relative to this package.
const committed = "../../testdata/corpus"

const regenerate = "regenerate with: go run ./redact/internal/corpusgen -out redact/testdata/corpus"

// readTree returns every regular file under dir by slash-separated relative path.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = data
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	return files
}

func readLabels(t *testing.T) []label {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(committed, labelsFile))
	if err != nil {
		t.Fatalf("read labels: %v (%s)", err, regenerate)
	}
	var labels []label
	if err := json.Unmarshal(data, &labels); err != nil {
		t.Fatalf("parse labels: %v", err)
	}
	return labels
}

func TestCommittedCorpusMatchesGenerator(t *testing.T) {
	dir := t.TempDir()
	if err := generate(dir); err != nil {
		t.Fatalf("generate: %v", err)
	}
	want := readTree(t, dir)
	got := readTree(t, committed)
	var problems []string
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			problems = append(problems, "missing "+p)
		case !bytes.Equal(g, w):
			problems = append(problems, "differs "+p)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			problems = append(problems, "not generated "+p)
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		t.Fatalf("committed corpus is out of date with the generator (%s):\n%s", regenerate, strings.Join(problems, "\n"))
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		if err := generate(dir); err != nil {
			t.Fatalf("generate: %v", err)
		}
	}
	ta, tb := readTree(t, a), readTree(t, b)
	if len(ta) != len(tb) {
		t.Fatalf("two runs wrote %d and %d files", len(ta), len(tb))
	}
	for p, data := range ta {
		if !bytes.Equal(data, tb[p]) {
			t.Errorf("%s differs between two runs", p)
		}
	}
}

func TestEveryLabelOccursInItsFile(t *testing.T) {
	labels := readLabels(t)
	if len(labels) == 0 {
		t.Fatal("labels.json is empty")
	}
	type key struct{ file, secret string }
	want := map[key]int{}
	for _, l := range labels {
		if !strings.HasPrefix(l.File, "positive/") || l.Kind == "" || l.Secret == "" {
			t.Errorf("malformed label %+v", l)
			continue
		}
		want[key{l.File, l.Secret}]++
	}
	for k, n := range want {
		data, err := os.ReadFile(filepath.Join(committed, filepath.FromSlash(k.file)))
		if err != nil {
			t.Errorf("label file: %v", err)
			continue
		}
		if got := strings.Count(string(data), k.secret); got != n {
			t.Errorf("%s: secret %.24q… labelled %d times occurs %d times", k.file, k.secret, n, got)
		}
	}
}

func TestEveryPositiveFileHasLabels(t *testing.T) {
	labelled := map[string]bool{}
	for _, l := range readLabels(t) {
		labelled[l.File] = true
	}
	for p := range readTree(t, committed) {
		if strings.HasPrefix(p, "positive/") && !labelled[p] {
			t.Errorf("%s has no labels", p)
		}
	}
}

func TestKindCoverage(t *testing.T) {
	count := map[string]int{}
	exts := map[string]map[string]bool{}
	for _, l := range readLabels(t) {
		count[l.Kind]++
		if exts[l.Kind] == nil {
			exts[l.Kind] = map[string]bool{}
		}
		exts[l.Kind][path.Ext(l.File)] = true
	}
	if len(count) < 40 {
		t.Errorf("corpus has %d secret kinds, want at least 40", len(count))
	}
	for kind, n := range count {
		if n < 2 {
			t.Errorf("kind %s occurs %d time, want at least 2", kind, n)
		}
		if len(exts[kind]) < 2 {
			t.Errorf("kind %s appears only in %v files, want two file types", kind, exts[kind])
		}
	}
}

func TestNegativesAreLargeAndSecretFree(t *testing.T) {
	labels := readLabels(t)
	total := 0
	for p, data := range readTree(t, committed) {
		if !strings.HasPrefix(p, "negative/") {
			continue
		}
		total += len(data)
		for _, l := range labels {
			if bytes.Contains(data, []byte(l.Secret)) {
				t.Errorf("%s contains the %s secret labelled in %s", p, l.Kind, l.File)
			}
		}
	}
	if total < 1<<20 {
		t.Errorf("negatives total %d bytes, want at least 1 MiB", total)
	}
}

func TestJSONFilesAreValid(t *testing.T) {
	for p, data := range readTree(t, committed) {
		switch path.Ext(p) {
		case ".json":
			if !json.Valid(data) {
				t.Errorf("%s is not valid JSON", p)
			}
		case ".jsonl":
			for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
				if !json.Valid(line) {
					t.Errorf("%s line %d is not valid JSON", p, i+1)
				}
			}
		}
	}
}

// TestSecretsFollowVendorFormats checks every labelled secret against the shape its vendor
// issues, so a generator edit cannot quietly produce tokens no real system would emit.
func TestSecretsFollowVendorFormats(t *testing.T) {
	pem := func(typ string) *regexp.Regexp {
		// PEM blocks appear raw, with JSON-escaped newlines, or indented inside YAML.
		return regexp.MustCompile(`^-----BEGIN ` + typ + `-----(\n *|\\n)([A-Za-z0-9+/=]{1,70}(\n *|\\n))+-----END ` + typ + `-----$`)
	}
	formats := map[string]*regexp.Regexp{
		"aws-access-key-id":             regexp.MustCompile(`^(AKIA|ASIA)[A-Z2-7]{16}$`),
		"aws-secret-access-key":         regexp.MustCompile(`^[A-Za-z0-9+/]{40}$`),
		"aws-session-token":             regexp.MustCompile(`^IQoJb3JpZ2luX2Vj[A-Za-z0-9+/]{700,}={0,2}$`),
		"gcp-api-key":                   regexp.MustCompile(`^AIza[0-9A-Za-z_-]{35}$`),
		"gcp-service-account-key":       pem("PRIVATE KEY"),
		"azure-ad-client-secret":        regexp.MustCompile(`^[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{34}$`),
		"azure-storage-account-key":     regexp.MustCompile(`^[A-Za-z0-9+/]{86}==$`),
		"azure-shared-access-key":       regexp.MustCompile(`^[A-Za-z0-9+/]{43}=$`),
		"azure-sas-token":               regexp.MustCompile(`^sv=[0-9-]{10}&ss=[bfqt]+&srt=[sco]+&sp=[a-z]+&se=[0-9T:Z-]{20}&st=[0-9T:Z-]{20}&spr=https&sig=([A-Za-z0-9]|%2B|%2F|%3D)+$`),
		"github-pat":                    regexp.MustCompile(`^ghp_[A-Za-z0-9]{36}$`),
		"github-oauth":                  regexp.MustCompile(`^gho_[A-Za-z0-9]{36}$`),
		"github-app-token":              regexp.MustCompile(`^gh[su]_[A-Za-z0-9]{36}$`),
		"github-fine-grained-pat":       regexp.MustCompile(`^github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}$`),
		"gitlab-pat":                    regexp.MustCompile(`^glpat-[A-Za-z0-9_-]{20}$`),
		"slack-bot-token":               regexp.MustCompile(`^xoxb-[0-9]{10,13}-[0-9]{10,13}-[A-Za-z0-9]{24}$`),
		"slack-user-token":              regexp.MustCompile(`^xoxp-[0-9]{10,13}-[0-9]{10,13}-[0-9]{10,13}-[a-f0-9]{32}$`),
		"slack-webhook-url":             regexp.MustCompile(`^[A-Za-z0-9]{24}$`),
		"discord-webhook-url":           regexp.MustCompile(`^[A-Za-z0-9_-]{68}$`),
		"discord-bot-token":             regexp.MustCompile(`^MT[A-Za-z0-9]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{38}$`),
		"telegram-bot-token":            regexp.MustCompile(`^[0-9]{8,10}:AA[A-Za-z0-9_-]{33}$`),
		"twilio-api-key":                regexp.MustCompile(`^SK[0-9a-f]{32}$`),
		"twilio-api-secret":             regexp.MustCompile(`^[A-Za-z0-9]{32}$`),
		"twilio-auth-token":             regexp.MustCompile(`^[0-9a-f]{32}$`),
		"sendgrid-api-key":              regexp.MustCompile(`^SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}$`),
		"mailgun-api-key":               regexp.MustCompile(`^key-[0-9a-f]{32}$`),
		"mailchimp-api-key":             regexp.MustCompile(`^[0-9a-f]{32}-us[0-9]{2}$`),
		"stripe-secret-key":             regexp.MustCompile(`^sk_live_[A-Za-z0-9]{99}$`),
		"stripe-restricted-key":         regexp.MustCompile(`^rk_live_[A-Za-z0-9]{99}$`),
		"square-access-token":           regexp.MustCompile(`^EAAA[A-Za-z0-9_-]{60}$`),
		"shopify-access-token":          regexp.MustCompile(`^shpat_[a-f0-9]{32}$`),
		"openai-api-key":                regexp.MustCompile(`^sk-(proj|svcacct)-[A-Za-z0-9_-]{74}T3BlbkFJ[A-Za-z0-9_-]{74}$`),
		"openai-legacy-api-key":         regexp.MustCompile(`^sk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}$`),
		"anthropic-api-key":             regexp.MustCompile(`^sk-ant-api03-[A-Za-z0-9_-]{93}AA$`),
		"huggingface-token":             regexp.MustCompile(`^hf_[A-Za-z]{34}$`),
		"cohere-api-key":                regexp.MustCompile(`^[A-Za-z0-9]{40}$`),
		"perplexity-api-key":            regexp.MustCompile(`^pplx-[A-Za-z0-9]{48}$`),
		"npm-token":                     regexp.MustCompile(`^npm_[A-Za-z0-9]{36}$`),
		"pypi-token":                    regexp.MustCompile(`^pypi-AgEIcHlwaS5vcmcCJ[A-Za-z0-9_-]{100,}$`),
		"dockerhub-pat":                 regexp.MustCompile(`^dckr_pat_[A-Za-z0-9_-]{27}$`),
		"heroku-api-key":                regexp.MustCompile(`^HRKU-AA[A-Za-z0-9_-]{58}$`),
		"digitalocean-pat":              regexp.MustCompile(`^dop_v1_[a-f0-9]{64}$`),
		"vault-token":                   regexp.MustCompile(`^hvs\.CAESI[A-Za-z0-9_-]{86}$`),
		"terraform-cloud-token":         regexp.MustCompile(`^[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9]{67}$`),
		"doppler-token":                 regexp.MustCompile(`^dp\.pt\.[A-Za-z0-9]{43}$`),
		"databricks-token":              regexp.MustCompile(`^dapi[a-f0-9]{32}(-[0-9])?$`),
		"datadog-api-key":               regexp.MustCompile(`^[a-f0-9]{32}$`),
		"datadog-app-key":               regexp.MustCompile(`^[a-f0-9]{40}$`),
		"newrelic-user-api-key":         regexp.MustCompile(`^NRAK-[A-Z0-9]{27}$`),
		"sentry-user-token":             regexp.MustCompile(`^sntryu_[a-f0-9]{64}$`),
		"sentry-org-token":              regexp.MustCompile(`^sntrys_eyJpYXQiO[A-Za-z0-9+/]+={0,2}_[A-Za-z0-9+/]{43}$`),
		"linear-api-key":                regexp.MustCompile(`^lin_api_[A-Za-z0-9]{40}$`),
		"grafana-service-account-token": regexp.MustCompile(`^glsa_[A-Za-z0-9]{32}_[a-f0-9]{8}$`),
		"pulumi-access-token":           regexp.MustCompile(`^pul-[a-f0-9]{40}$`),
		"postman-api-key":               regexp.MustCompile(`^PMAK-[a-f0-9]{24}-[a-f0-9]{34}$`),
		"age-secret-key":                regexp.MustCompile(`^AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}$`),
		"django-secret-key":             regexp.MustCompile(`^(django-insecure-)?[a-z0-9!@#$%^&*(\-_=+)]{50}$`),
		"jwt":                           regexp.MustCompile(`^eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43,}$`),
		"rsa-private-key":               pem("RSA PRIVATE KEY"),
		"pkcs8-private-key":             pem("PRIVATE KEY"),
		"ec-private-key":                pem("EC PRIVATE KEY"),
		"openssh-private-key":           pem("OPENSSH PRIVATE KEY"),
		"basic-auth-credentials":        regexp.MustCompile(`^[A-Za-z0-9+/]{16,}={0,2}$`),
	}
	// Passwords and generic secrets have no vendor shape, only a strength floor.
	strong := regexp.MustCompile(`^[A-Za-z0-9!*_.^%~+/=-]{16,}$`)
	for _, kind := range []string{"postgres-password", "mysql-password", "mongodb-password", "redis-password", "amqp-password",
		"url-password", "basic-auth-password", "generic-password", "generic-api-key", "generic-secret"} {
		formats[kind] = strong
	}

	checksummed := regexp.MustCompile(`^(ghp|gho|ghs|ghu|npm)_`)
	for _, l := range readLabels(t) {
		re, ok := formats[l.Kind]
		if !ok {
			t.Errorf("kind %s has no format check", l.Kind)
			continue
		}
		if !re.MatchString(l.Secret) {
			t.Errorf("%s: %s secret %.40q… does not match %s", l.File, l.Kind, l.Secret, re)
		}
		if checksummed.MatchString(l.Secret) && !validTokenChecksum(l.Secret) {
			t.Errorf("%s: %s %.12q… has a wrong CRC32 checksum", l.File, l.Kind, l.Secret)
		}
		if l.Kind == "age-secret-key" && !validBech32(strings.ToLower(l.Secret)) {
			t.Errorf("%s: age key has a wrong bech32 checksum", l.File)
		}
		if l.Kind == "grafana-service-account-token" {
			body, sum := l.Secret[:len(l.Secret)-9], l.Secret[len(l.Secret)-8:]
			if fmt.Sprintf("%08x", crc32.ChecksumIEEE([]byte(body))) != sum {
				t.Errorf("%s: grafana token has a wrong CRC32 suffix", l.File)
			}
		}
		if l.Kind == "jwt" {
			for i, part := range strings.Split(l.Secret, ".")[:2] {
				raw, err := base64.RawURLEncoding.DecodeString(part)
				if err != nil || !json.Valid(raw) {
					t.Errorf("%s: JWT part %d is not base64url JSON", l.File, i)
				}
			}
		}
	}
}

// validTokenChecksum checks the last six characters of a GitHub or npm token against the CRC32
// of the 30 random characters before them.
func validTokenChecksum(tok string) bool {
	body, sum := tok[4:len(tok)-6], tok[len(tok)-6:]
	var v uint64
	for i := range len(sum) {
		d := strings.IndexByte(base62, sum[i])
		if d < 0 {
			return false
		}
		v = v*62 + uint64(d)
	}
	return v == uint64(crc32.ChecksumIEEE([]byte(body)))
}

// validBech32 verifies a lower-case bech32 string's checksum (BIP 173).
func validBech32(s string) bool {
	const charset = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
	sep := strings.LastIndexByte(s, '1')
	if sep < 1 || len(s)-sep < 7 {
		return false
	}
	var v []uint32
	for _, c := range s[:sep] {
		v = append(v, uint32(c)>>5)
	}
	v = append(v, 0)
	for _, c := range s[:sep] {
		v = append(v, uint32(c)&31)
	}
	for _, c := range s[sep+1:] {
		d := strings.IndexRune(charset, c)
		if d < 0 {
			return false
		}
		v = append(v, uint32(d))
	}
	gen := [5]uint32{0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3}
	chk := uint32(1)
	for _, x := range v {
		top := chk >> 25
		chk = (chk&0x1ffffff)<<5 ^ x
		for i := range 5 {
			if top>>i&1 == 1 {
				chk ^= gen[i]
			}
		}
	}
	return chk == 1
}

package main

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"
)

// Alphabets of the token formats below.
const (
	upper       = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	lower       = "abcdefghijklmnopqrstuvwxyz"
	digits      = "0123456789"
	hexDigits   = "0123456789abcdef"
	alnum       = upper + lower + digits
	upperAlnum  = upper + digits
	lowerAlnum  = lower + digits
	letters     = upper + lower
	urlSafe     = alnum + "-_"
	base32Upper = upper + "234567"
	// base62 is ordered the way GitHub and npm encode token checksums: digits first.
	base62 = digits + upper + lower
	// djangoChars is the alphabet of django.core.management.utils.get_random_secret_key.
	djangoChars = lower + digits + "!@#$%^&*(-_=+)"
)

// chars returns n characters drawn uniformly from alphabet.
func chars(r *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// hexs returns n lower-case hex digits.
func hexs(r *rand.Rand, n int) string { return chars(r, hexDigits, n) }

// number returns n decimal digits without a leading zero.
func number(r *rand.Rand, n int) string {
	return chars(r, "123456789", 1) + chars(r, digits, n-1)
}

// randBytes returns n bytes from r.
func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// oneOf returns one of the options.
func oneOf(r *rand.Rand, options ...string) string { return options[r.IntN(len(options))] }

// secretGen makes one secret of a kind. text is what goes into the file and secret the part of
// it a redactor must remove (they differ when the credential sits inside a larger identifier,
// such as the token at the end of a webhook path).
type secretGen struct {
	kind string
	gen  func(r *rand.Rand) (text, secret string)
}

// same wraps a generator whose whole text is the secret.
func same(kind string, f func(r *rand.Rand) string) secretGen {
	return secretGen{kind: kind, gen: func(r *rand.Rand) (string, string) {
		s := f(r)
		return s, s
	}}
}

// secretGenerators returns the generators by template name. Several names can share a kind when
// a vendor has variants of one credential (AKIA and ASIA key ids, ghs_ and ghu_ tokens).
func secretGenerators() map[string]secretGen {
	return map[string]secretGen{
		"aws-access-key-id": same("aws-access-key-id", func(r *rand.Rand) string {
			return "AKIA" + chars(r, base32Upper, 16)
		}),
		"aws-sts-access-key-id": same("aws-access-key-id", func(r *rand.Rand) string {
			return "ASIA" + chars(r, base32Upper, 16)
		}),
		"aws-secret-access-key": same("aws-secret-access-key", func(r *rand.Rand) string {
			return chars(r, alnum+"+/", 40)
		}),
		"aws-session-token":         same("aws-session-token", awsSessionToken),
		"gcp-api-key":               same("gcp-api-key", func(r *rand.Rand) string { return "AIzaSy" + chars(r, urlSafe, 33) }),
		"gcp-service-account-key":   same("gcp-service-account-key", func(r *rand.Rand) string { return pemBlock("PRIVATE KEY", pkcs8RSA(r)) }),
		"azure-ad-client-secret":    same("azure-ad-client-secret", azureClientSecret),
		"azure-storage-account-key": same("azure-storage-account-key", func(r *rand.Rand) string { return base64.StdEncoding.EncodeToString(randBytes(r, 64)) }),
		"azure-shared-access-key":   same("azure-shared-access-key", func(r *rand.Rand) string { return base64.StdEncoding.EncodeToString(randBytes(r, 32)) }),
		"azure-sas-token":           same("azure-sas-token", azureSASToken),
		"github-pat":                same("github-pat", func(r *rand.Rand) string { return checksummedToken(r, "ghp_") }),
		"github-oauth":              same("github-oauth", func(r *rand.Rand) string { return checksummedToken(r, "gho_") }),
		"github-app-token":          same("github-app-token", func(r *rand.Rand) string { return checksummedToken(r, "ghs_") }),
		"github-user-to-server":     same("github-app-token", func(r *rand.Rand) string { return checksummedToken(r, "ghu_") }),
		"github-fine-grained-pat": same("github-fine-grained-pat", func(r *rand.Rand) string {
			return "github_pat_11" + chars(r, upperAlnum, 20) + "_" + chars(r, alnum, 59)
		}),
		"gitlab-pat": same("gitlab-pat", func(r *rand.Rand) string { return "glpat-" + chars(r, urlSafe, 20) }),
		"slack-bot-token": same("slack-bot-token", func(r *rand.Rand) string {
			return "xoxb-" + number(r, 12) + "-" + number(r, 13) + "-" + chars(r, alnum, 24)
		}),
		"slack-user-token": same("slack-user-token", func(r *rand.Rand) string {
			return "xoxp-" + number(r, 12) + "-" + number(r, 12) + "-" + number(r, 13) + "-" + hexs(r, 32)
		}),
		"slack-webhook-url": {kind: "slack-webhook-url", gen: func(r *rand.Rand) (string, string) {
			tok := chars(r, alnum, 24)
			return "T" + chars(r, upperAlnum, 8) + "/B" + chars(r, upperAlnum, 10) + "/" + tok, tok
		}},
		"discord-webhook-url": {kind: "discord-webhook-url", gen: func(r *rand.Rand) (string, string) {
			tok := chars(r, urlSafe, 68)
			return snowflake(r) + "/" + tok, tok
		}},
		"discord-bot-token": same("discord-bot-token", func(r *rand.Rand) string {
			ts := make([]byte, 4)
			binary.BigEndian.PutUint32(ts, 0x67000000+r.Uint32N(0x01000000))
			return base64.RawStdEncoding.EncodeToString([]byte(snowflake(r))) + "." +
				base64.RawURLEncoding.EncodeToString(ts) + "." + chars(r, urlSafe, 38)
		}),
		"telegram-bot-token": same("telegram-bot-token", func(r *rand.Rand) string {
			return chars(r, "567", 1) + chars(r, digits, 9) + ":AA" + chars(r, urlSafe, 33)
		}),
		"twilio-api-key":    same("twilio-api-key", func(r *rand.Rand) string { return "SK" + hexs(r, 32) }),
		"twilio-api-secret": same("twilio-api-secret", func(r *rand.Rand) string { return chars(r, alnum, 32) }),
		"twilio-auth-token": same("twilio-auth-token", func(r *rand.Rand) string { return hexs(r, 32) }),
		"sendgrid-api-key": same("sendgrid-api-key", func(r *rand.Rand) string {
			return "SG." + chars(r, urlSafe, 22) + "." + chars(r, urlSafe, 43)
		}),
		"mailgun-api-key": same("mailgun-api-key", func(r *rand.Rand) string { return "key-" + hexs(r, 32) }),
		"mailchimp-api-key": same("mailchimp-api-key", func(r *rand.Rand) string {
			return hexs(r, 32) + fmt.Sprintf("-us%d", 10+r.IntN(12))
		}),
		"stripe-secret-key":     same("stripe-secret-key", func(r *rand.Rand) string { return "sk_live_51" + chars(r, alnum, 97) }),
		"stripe-restricted-key": same("stripe-restricted-key", func(r *rand.Rand) string { return "rk_live_51" + chars(r, alnum, 97) }),
		"square-access-token":   same("square-access-token", func(r *rand.Rand) string { return "EAAA" + chars(r, urlSafe, 60) }),
		"shopify-access-token":  same("shopify-access-token", func(r *rand.Rand) string { return "shpat_" + hexs(r, 32) }),
		"openai-api-key": same("openai-api-key", func(r *rand.Rand) string {
			return "sk-proj-" + chars(r, urlSafe, 74) + "T3BlbkFJ" + chars(r, urlSafe, 74)
		}),
		"openai-service-account-key": same("openai-api-key", func(r *rand.Rand) string {
			return "sk-svcacct-" + chars(r, urlSafe, 74) + "T3BlbkFJ" + chars(r, urlSafe, 74)
		}),
		"openai-legacy-api-key": same("openai-legacy-api-key", func(r *rand.Rand) string {
			return "sk-" + chars(r, alnum, 20) + "T3BlbkFJ" + chars(r, alnum, 20)
		}),
		"anthropic-api-key": same("anthropic-api-key", func(r *rand.Rand) string {
			return "sk-ant-api03-" + chars(r, urlSafe, 93) + "AA"
		}),
		"huggingface-token":  same("huggingface-token", func(r *rand.Rand) string { return "hf_" + chars(r, letters, 34) }),
		"cohere-api-key":     same("cohere-api-key", func(r *rand.Rand) string { return chars(r, alnum, 40) }),
		"perplexity-api-key": same("perplexity-api-key", func(r *rand.Rand) string { return "pplx-" + chars(r, alnum, 48) }),
		"npm-token":          same("npm-token", func(r *rand.Rand) string { return checksummedToken(r, "npm_") }),
		"pypi-token":         same("pypi-token", pypiToken),
		"dockerhub-pat":      same("dockerhub-pat", func(r *rand.Rand) string { return "dckr_pat_" + chars(r, urlSafe, 27) }),
		"heroku-api-key":     same("heroku-api-key", func(r *rand.Rand) string { return "HRKU-AA" + chars(r, urlSafe, 58) }),
		"digitalocean-pat":   same("digitalocean-pat", func(r *rand.Rand) string { return "dop_v1_" + hexs(r, 64) }),
		"vault-token":        same("vault-token", vaultToken),
		"terraform-cloud-token": same("terraform-cloud-token", func(r *rand.Rand) string {
			return chars(r, alnum, 14) + ".atlasv1." + chars(r, alnum, 67)
		}),
		"doppler-token": same("doppler-token", func(r *rand.Rand) string { return "dp.pt." + chars(r, alnum, 43) }),
		"databricks-token": same("databricks-token", func(r *rand.Rand) string {
			return "dapi" + hexs(r, 32) + oneOf(r, "", "", "-2", "-3")
		}),
		"datadog-api-key":       same("datadog-api-key", func(r *rand.Rand) string { return hexs(r, 32) }),
		"datadog-app-key":       same("datadog-app-key", func(r *rand.Rand) string { return hexs(r, 40) }),
		"newrelic-user-api-key": same("newrelic-user-api-key", func(r *rand.Rand) string { return "NRAK-" + chars(r, upperAlnum, 27) }),
		"sentry-user-token":     same("sentry-user-token", func(r *rand.Rand) string { return "sntryu_" + hexs(r, 64) }),
		"sentry-org-token":      same("sentry-org-token", sentryOrgToken),
		"linear-api-key":        same("linear-api-key", func(r *rand.Rand) string { return "lin_api_" + chars(r, alnum, 40) }),
		"grafana-service-account-token": same("grafana-service-account-token", func(r *rand.Rand) string {
			body := "glsa_" + chars(r, alnum, 32)
			return fmt.Sprintf("%s_%08x", body, crc32.ChecksumIEEE([]byte(body)))
		}),
		"pulumi-access-token": same("pulumi-access-token", func(r *rand.Rand) string { return "pul-" + hexs(r, 40) }),
		"postman-api-key": same("postman-api-key", func(r *rand.Rand) string {
			return "PMAK-" + hexs(r, 24) + "-" + hexs(r, 34)
		}),
		"age-secret-key":    same("age-secret-key", func(r *rand.Rand) string { return strings.ToUpper(bech32("age-secret-key-", randBytes(r, 32))) }),
		"django-secret-key": same("django-secret-key", func(r *rand.Rand) string { return chars(r, djangoChars, 50) }),
		"django-insecure-key": same("django-secret-key", func(r *rand.Rand) string {
			return "django-insecure-" + chars(r, djangoChars, 50)
		}),
		"jwt":                 same("jwt", func(r *rand.Rand) string { return jwt(r, "RS256") }),
		"jwt-hs256":           same("jwt", func(r *rand.Rand) string { return jwt(r, "HS256") }),
		"jwt-es256":           same("jwt", func(r *rand.Rand) string { return jwt(r, "ES256") }),
		"jwt-k8s":             same("jwt", func(r *rand.Rand) string { return jwt(r, "K8S") }),
		"rsa-private-key":     same("rsa-private-key", func(r *rand.Rand) string { return pemBlock("RSA PRIVATE KEY", pkcs1RSA(r)) }),
		"pkcs8-private-key":   same("pkcs8-private-key", func(r *rand.Rand) string { return pemBlock("PRIVATE KEY", pkcs8RSA(r)) }),
		"ec-private-key":      same("ec-private-key", func(r *rand.Rand) string { return pemBlock("EC PRIVATE KEY", sec1P256(r)) }),
		"openssh-private-key": same("openssh-private-key", openSSHEd25519),
		"postgres-password":   same("postgres-password", urlPassword),
		"mysql-password":      same("mysql-password", urlPassword),
		"mongodb-password":    same("mongodb-password", urlPassword),
		"redis-password":      same("redis-password", urlPassword),
		"amqp-password":       same("amqp-password", urlPassword),
		"url-password":        same("url-password", urlPassword),
		// Heroku add-ons issue their own password shapes.
		"heroku-postgres-password":   same("postgres-password", func(r *rand.Rand) string { return hexs(r, 64) }),
		"heroku-redis-password":      same("redis-password", func(r *rand.Rand) string { return "p" + hexs(r, 64) }),
		"heroku-amqp-password":       same("amqp-password", func(r *rand.Rand) string { return chars(r, urlSafe, 32) }),
		"github-oauth-client-secret": same("generic-secret", func(r *rand.Rand) string { return hexs(r, 40) }),
		"google-oauth-client-secret": same("generic-secret", func(r *rand.Rand) string { return "GOCSPX-" + chars(r, urlSafe, 28) }),
		"auth0-client-secret":        same("generic-secret", func(r *rand.Rand) string { return chars(r, urlSafe, 64) }),
		"rails-master-key":           same("generic-secret", func(r *rand.Rand) string { return hexs(r, 32) }),
		"basic-auth-password": same("basic-auth-password", func(r *rand.Rand) string {
			return chars(r, alnum, 8+r.IntN(6)) + chars(r, "-_.", 1) + chars(r, alnum, 6+r.IntN(6))
		}),
		"basic-auth-credentials": same("basic-auth-credentials", func(r *rand.Rand) string {
			user := oneOf(r, "deploy", "ci-bot", "admin", "svc-metrics", "jenkins", "release-bot", "grafana")
			return base64.StdEncoding.EncodeToString([]byte(user + ":" + urlPassword(r)))
		}),
		"generic-password": same("generic-password", genericPassword),
		"generic-api-key": same("generic-api-key", func(r *rand.Rand) string {
			switch r.IntN(3) {
			case 0:
				return hexs(r, 32)
			case 1:
				return chars(r, alnum, 40)
			default:
				return chars(r, upperAlnum, 32)
			}
		}),
		"generic-secret": same("generic-secret", func(r *rand.Rand) string {
			switch r.IntN(3) {
			case 0: // openssl rand -base64 32
				return base64.StdEncoding.EncodeToString(randBytes(r, 32))
			case 1: // openssl rand -hex 32
				return hexs(r, 64)
			default: // OAuth client secrets as identity providers issue them
				return chars(r, urlSafe, 64)
			}
		}),
	}
}

// checksummedToken builds a GitHub or npm token: prefix, 30 random base62 characters, and the
// CRC32 of those characters in base62, left-padded to six.
func checksummedToken(r *rand.Rand, prefix string) string {
	body := chars(r, alnum, 30)
	sum := crc32.ChecksumIEEE([]byte(body))
	enc := make([]byte, 6)
	for i := 5; i >= 0; i-- {
		enc[i] = base62[sum%62]
		sum /= 62
	}
	return prefix + body + string(enc)
}

// snowflake returns a Discord id: 19 decimal digits starting with 1.
func snowflake(r *rand.Rand) string { return "1" + chars(r, digits, 18) }

// azureClientSecret returns an Entra ID application secret: three characters, a digit, "Q~" and
// 34 more characters.
func azureClientSecret(r *rand.Rand) string {
	return chars(r, alnum+"_~.", 3) + chars(r, digits, 1) + "Q~" + chars(r, alnum+"_~.-", 33) + chars(r, alnum, 1)
}

// urlPassword returns a password that needs no percent-encoding inside a URL.
// azureSASToken is an account shared access signature as a connection string carries it: the
// query parameters of the grant, then sig=, the percent-encoded base64 of an HMAC-SHA256.
func azureSASToken(r *rand.Rand) string {
	start := time.Date(2025, time.March, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(300*24)) * time.Hour)
	return "sv=2022-11-02&ss=" + oneOf(r, "b", "bf", "bfqt") + "&srt=" + oneOf(r, "sco", "co", "o") +
		"&sp=" + oneOf(r, "rl", "rwdlac", "rwdlacupiytfx") +
		"&se=" + start.AddDate(0, 6, 0).Format("2006-01-02T15:04:05Z") + "&st=" + start.Format("2006-01-02T15:04:05Z") +
		"&spr=https&sig=" + url.QueryEscape(base64.StdEncoding.EncodeToString(randBytes(r, 32)))
}

func urlPassword(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return chars(r, alnum, 12) + chars(r, "-_.~", 1) + chars(r, alnum, 10+r.IntN(8))
	}
	return chars(r, alnum, 20+r.IntN(13))
}

// genericPassword returns a strong password as a password manager or a provisioning script
// generates it.
func genericPassword(r *rand.Rand) string {
	switch r.IntN(3) {
	case 0:
		return chars(r, alnum, 24+r.IntN(9))
	case 1:
		var b strings.Builder
		b.WriteString(chars(r, letters, 1))
		for b.Len() < 18+r.IntN(8) {
			if r.IntN(6) == 0 {
				b.WriteString(chars(r, "!*_-.^%", 1))
			} else {
				b.WriteString(chars(r, alnum, 1))
			}
		}
		b.WriteString(chars(r, alnum, 1))
		return b.String()
	default:
		return chars(r, alnum, 6) + "-" + chars(r, alnum, 6) + "-" + chars(r, alnum, 6)
	}
}

// awsSessionToken mimics an STS session token: base64 of a binary blob that opens with
// "!\n\torigin_ec", the region and a DER ECDSA signature, then opaque bytes.
func awsSessionToken(r *rand.Rand) string {
	var b []byte
	b = append(b, "!\n\torigin_ec"...)
	b = append(b, 0x10, byte(0x40+r.IntN(0x40)), 0x1a, 9)
	b = append(b, "us-east-1"...)
	b = append(b, 0x22, 0x47, 0x30, 0x45, 0x02, 0x21, 0x00, byte(0x80|r.IntN(0x80)))
	b = append(b, randBytes(r, 31)...)
	b = append(b, 0x02, 0x20, byte(r.IntN(0x80)))
	b = append(b, randBytes(r, 31)...)
	b = append(b, 0x2a, byte(0x80|r.IntN(0x80)), 0x04)
	b = append(b, randBytes(r, 560+r.IntN(120))...)
	return base64.StdEncoding.EncodeToString(b)
}

// pypiToken encodes a PyPI API token: "pypi-" and the unpadded URL-safe base64 of a version 2
// binary macaroon with location pypi.org, a UUID identifier, one permissions caveat and a 32-byte
// signature.
func pypiToken(r *rand.Rand) string {
	field := func(b []byte, typ byte, data []byte) []byte {
		b = append(b, typ)
		b = binary.AppendUvarint(b, uint64(len(data)))
		return append(b, data...)
	}
	caveat := `{"version": 1, "permissions": "user"}`
	if r.IntN(2) == 0 {
		caveat = fmt.Sprintf(`{"version": 1, "permissions": {"projects": [%q]}}`, oneOf(r, "acme-sdk", "ledgerline", "quartz-client", "tiny-etl"))
	}
	b := []byte{2}
	b = field(b, 1, []byte("pypi.org"))
	b = field(b, 2, []byte(uuid(r)))
	b = append(b, 0)
	b = field(b, 2, []byte(caveat))
	b = append(b, 0, 0)
	b = field(b, 6, randBytes(r, 32))
	return "pypi-" + base64.RawURLEncoding.EncodeToString(b)
}

// vaultToken encodes a Vault 1.10+ service token: "hvs." and the base64 of a protobuf holding
// a 32-byte HMAC and the inner "hvs." token id.
func vaultToken(r *rand.Rand) string {
	inner := "hvs." + chars(r, alnum, 24)
	b := []byte{0x08, 0x01, 0x12, 0x20}
	b = append(b, randBytes(r, 32)...)
	b = append(b, 0x1a, byte(len(inner)+2), 0x0a, byte(len(inner)))
	b = append(b, inner...)
	return "hvs." + base64.RawURLEncoding.EncodeToString(b)
}

// sentryOrgToken encodes a Sentry organization auth token: "sntrys_", base64 JSON claims, "_" and
// a 43-character secret.
func sentryOrgToken(r *rand.Rand) string {
	org := oneOf(r, "acme-corp", "northwind", "globex", "initech", "umbrella-labs")
	claims := fmt.Sprintf(`{"iat":%d.%06d,"url":"https://sentry.io","region_url":"https://us.sentry.io","org":%q}`,
		1714000000+r.IntN(20000000), r.IntN(1000000), org)
	return "sntrys_" + base64.StdEncoding.EncodeToString([]byte(claims)) + "_" + chars(r, alnum+"+/", 43)
}

// uuid returns a random version 4 UUID.
func uuid(r *rand.Rand) string {
	b := randBytes(r, 16)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// jwt returns a signed-looking JSON Web Token with claims an identity provider would issue.
func jwt(r *rand.Rand, alg string) string {
	iat := 1735689600 + r.IntN(25000000)
	var header, claims string
	var sigLen int
	switch alg {
	case "HS256":
		header = `{"alg":"HS256","typ":"JWT"}`
		claims = fmt.Sprintf(`{"aud":"authenticated","exp":%d,"iat":%d,"iss":"https://%s.supabase.co/auth/v1","sub":%q,"email":"%s@%s","role":"%s","session_id":%q}`,
			iat+3600, iat, chars(r, lower, 20), uuid(r), oneOf(r, "maria.lopez", "j.chen", "priya", "ops", "d.okafor"),
			oneOf(r, "northwind.io", "acme.dev", "globex.com"), oneOf(r, "authenticated", "service_role"), uuid(r))
		sigLen = 32
	case "K8S":
		header = fmt.Sprintf(`{"alg":"RS256","kid":%q}`, chars(r, urlSafe, 43))
		ns := oneOf(r, "ci", "argocd", "monitoring")
		claims = fmt.Sprintf(`{"aud":["https://kubernetes.default.svc"],"exp":%d,"iat":%d,"iss":"https://oidc.eks.eu-west-1.amazonaws.com/id/%s","kubernetes.io":{"namespace":%q,"serviceaccount":{"name":"deployer","uid":%q}},"nbf":%d,"sub":"system:serviceaccount:%s:deployer"}`,
			iat+31536000, iat, chars(r, upperAlnum, 32), ns, uuid(r), iat, ns)
		sigLen = 256
	case "ES256":
		header = fmt.Sprintf(`{"alg":"ES256","kid":%q,"typ":"JWT"}`, hexs(r, 16))
		claims = fmt.Sprintf(`{"iss":"https://token.actions.githubusercontent.com","sub":"repo:%s:ref:refs/heads/main","aud":"sts.amazonaws.com","ref":"refs/heads/main","repository":%q,"run_id":"%d","iat":%d,"nbf":%d,"exp":%d}`,
			oneOf(r, "acme/infra", "northwind/api", "globex/web"), oneOf(r, "acme/infra", "northwind/api", "globex/web"),
			10000000000+r.IntN(900000000), iat, iat-5, iat+300)
		sigLen = 64
	default:
		header = fmt.Sprintf(`{"alg":"RS256","kid":%q,"typ":"JWT"}`, chars(r, urlSafe, 43))
		claims = fmt.Sprintf(`{"iss":"https://%s/","sub":"auth0|%s","aud":["https://api.%s","https://%s/userinfo"],"iat":%d,"exp":%d,"scope":"openid profile email offline_access","azp":%q,"permissions":["read:orders","write:orders"]}`,
			"login.northwind.io", hexs(r, 24), "northwind.io", "login.northwind.io", iat, iat+86400, chars(r, alnum, 32))
		sigLen = 256
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims)) + "." + enc.EncodeToString(randBytes(r, sigLen))
}

// bech32 encodes data with the human-readable part hrp (BIP 173), as age encodes its keys.
func bech32(hrp string, data []byte) string {
	const charset = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
	var values []byte
	acc, bits := 0, 0
	for _, b := range data {
		acc = acc<<8 | int(b)
		bits += 8
		for bits >= 5 {
			bits -= 5
			values = append(values, byte(acc>>bits&31))
		}
	}
	if bits > 0 {
		values = append(values, byte(acc<<(5-bits)&31))
	}
	polymod := func(v []byte) uint32 {
		gen := [5]uint32{0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3}
		chk := uint32(1)
		for _, x := range v {
			top := chk >> 25
			chk = chk&0x1ffffff<<5 ^ uint32(x)
			for i := range 5 {
				if top>>i&1 == 1 {
					chk ^= gen[i]
				}
			}
		}
		return chk
	}
	var exp []byte
	for _, c := range hrp {
		exp = append(exp, byte(c>>5))
	}
	exp = append(exp, 0)
	for _, c := range hrp {
		exp = append(exp, byte(c&31))
	}
	mod := polymod(append(append(exp, values...), 0, 0, 0, 0, 0, 0)) ^ 1
	for i := range 6 {
		values = append(values, byte(mod>>(5*(5-i))&31))
	}
	var b strings.Builder
	b.WriteString(hrp)
	b.WriteByte('1')
	for _, v := range values {
		b.WriteByte(charset[v])
	}
	return b.String()
}

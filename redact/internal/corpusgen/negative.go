package main

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// negativeFile is one file of negative/: text with no secret in it that nevertheless looks like
// secrets to a detector keyed on entropy, length or words such as "token" and "password".
type negativeFile struct {
	path  string
	build func(r *rand.Rand) string
}

// negativeFiles lists every negative file. Sizes are set so the directory holds a little over
// 1 MiB in total.
func negativeFiles() []negativeFile {
	return []negativeFile{
		{"negative/ids/psql-uuid-table.txt", uuidTable},
		{"negative/git/git-log.txt", gitLog},
		{"negative/digests/release-checksums.txt", checksums},
		{"negative/digests/docker-pull.log", dockerPull},
		{"negative/json/package-lock.json", packageLock},
		{"negative/html/inline-images.html", inlineImages},
		{"negative/js/vendor.min.js", minifiedJS},
		{"negative/prose/help-center.txt", helpCenter},
		{"negative/json/github-issues.json", githubIssues},
		{"negative/json/api-events.jsonl", apiEvents},
		{"negative/yaml/k8s-manifests.yaml", k8sManifests},
		{"negative/logs/nginx-access.log", nginxAccess},
		{"negative/traces/stack-traces.txt", stackTraces},
		{"negative/logs/npm-install.log", npmInstall},
		{"negative/logs/pip-install.log", pipInstall},
		{"negative/hexdump/xxd.txt", hexdump},
		{"negative/env/placeholders.env", placeholders},
		{"negative/go/go.sum", goSum},
		{"negative/terraform/plan.txt", terraformPlan},
		{"negative/logs/ci-masked.log", ciMasked},
	}
}

// Vocabulary shared by the negative generators. Functions rather than package variables keep
// every list immutable from the callers' point of view.

func people() []string {
	return []string{
		"Maria Lopez", "Jun Chen", "Priya Raman", "Daniel Okafor", "Sofia Rossi", "Lars Nilsson",
		"Amara Mensah", "Tomás García", "Hannah Weber", "Kenji Watanabe", "Olivia Brown", "Yusuf Demir",
	}
}

func npmPackages() []string {
	return []string{
		"react", "react-dom", "scheduler", "loose-envify", "js-tokens", "object-assign", "prop-types",
		"react-is", "@babel/runtime", "regenerator-runtime", "@babel/code-frame", "@babel/highlight",
		"chalk", "ansi-styles", "supports-color", "has-flag", "color-convert", "color-name", "escape-string-regexp",
		"picocolors", "postcss", "nanoid", "source-map-js", "autoprefixer", "browserslist", "caniuse-lite",
		"electron-to-chromium", "node-releases", "update-browserslist-db", "escalade", "fraction.js",
		"normalize-range", "postcss-value-parser", "tailwindcss", "lilconfig", "jiti", "fast-glob", "glob-parent",
		"is-glob", "is-extglob", "micromatch", "braces", "fill-range", "to-regex-range", "is-number", "picomatch",
		"merge2", "@nodelib/fs.stat", "@nodelib/fs.walk", "@nodelib/fs.scandir", "run-parallel", "queue-microtask",
		"fastq", "reusify", "typescript", "vite", "esbuild", "rollup", "@rollup/rollup-linux-x64-gnu",
		"@esbuild/linux-x64", "vitest", "@vitest/expect", "@vitest/runner", "@vitest/snapshot", "@vitest/spy",
		"chai", "assertion-error", "check-error", "deep-eql", "loupe", "pathval", "tinypool", "tinyspy",
		"magic-string", "@jridgewell/sourcemap-codec", "eslint", "@eslint/js", "@eslint/eslintrc", "ajv",
		"fast-deep-equal", "fast-json-stable-stringify", "json-schema-traverse", "uri-js", "punycode",
		"debug", "ms", "minimatch", "brace-expansion", "balanced-match", "concat-map", "semver", "lru-cache",
		"yallist", "axios", "follow-redirects", "form-data", "asynckit", "combined-stream", "delayed-stream",
		"mime-types", "mime-db", "proxy-from-env", "zod", "date-fns", "clsx", "tslib", "@types/react",
		"@types/prop-types", "csstype", "@types/node", "undici-types", "prettier", "lint-staged", "husky",
		"commander", "execa", "cross-spawn", "path-key", "shebang-command", "shebang-regex", "which", "isexe",
		"signal-exit", "strip-final-newline", "npm-run-path", "onetime", "mimic-fn", "human-signals",
		"get-stream", "is-stream", "merge-stream", "yaml", "dotenv", "uuid", "lodash", "lodash.merge",
		"@tanstack/react-query", "@tanstack/query-core", "react-router", "react-router-dom", "@remix-run/router",
		"keyboardevent-key-polyfill", "js-cookie", "jwt-decode", "@sentry/browser", "@sentry/core", "@sentry/utils",
	}
}

func goModules() []string {
	return []string{
		"github.com/aws/aws-sdk-go-v2", "github.com/aws/smithy-go", "github.com/cespare/xxhash/v2",
		"github.com/davecgh/go-spew", "github.com/go-logr/logr", "github.com/go-logr/stdr", "github.com/golang/protobuf",
		"github.com/google/go-cmp", "github.com/google/uuid", "github.com/jackc/pgx/v5", "github.com/jackc/pgpassfile",
		"github.com/jackc/pgservicefile", "github.com/jackc/puddle/v2", "github.com/klauspost/compress",
		"github.com/pmezard/go-difflib", "github.com/prometheus/client_golang", "github.com/prometheus/client_model",
		"github.com/prometheus/common", "github.com/prometheus/procfs", "github.com/redis/go-redis/v9",
		"github.com/spf13/cobra", "github.com/spf13/pflag", "github.com/stretchr/testify", "go.opentelemetry.io/otel",
		"go.opentelemetry.io/otel/metric", "go.opentelemetry.io/otel/trace", "go.uber.org/zap", "go.uber.org/multierr",
		"golang.org/x/crypto", "golang.org/x/net", "golang.org/x/sync", "golang.org/x/sys", "golang.org/x/text",
		"golang.org/x/time", "google.golang.org/genproto/googleapis/rpc", "google.golang.org/grpc",
		"google.golang.org/protobuf", "gopkg.in/yaml.v3", "github.com/dgryski/go-rendezvous", "github.com/gorilla/mux",
		"github.com/hashicorp/go-retryablehttp", "github.com/hashicorp/go-cleanhttp", "github.com/mattn/go-isatty",
		"github.com/rs/zerolog", "github.com/sirupsen/logrus", "github.com/golang-jwt/jwt/v5", "github.com/go-chi/chi/v5",
	}
}

func pyPackages() []string {
	return []string{
		"requests", "urllib3", "idna", "certifi", "charset-normalizer", "django", "asgiref", "sqlparse",
		"djangorestframework", "celery", "kombu", "billiard", "vine", "amqp", "click", "click-didyoumean",
		"click-repl", "click-plugins", "prompt-toolkit", "wcwidth", "python-dateutil", "six", "tzdata", "redis",
		"psycopg", "psycopg-binary", "gunicorn", "packaging", "whitenoise", "sentry-sdk", "boto3", "botocore",
		"jmespath", "s3transfer", "pydantic", "pydantic-core", "annotated-types", "typing-extensions", "httpx",
		"httpcore", "h11", "anyio", "sniffio", "numpy", "pandas", "pytz", "pyarrow", "sqlalchemy", "greenlet",
		"pytest", "pluggy", "iniconfig", "coverage", "pytest-cov", "ruff", "mypy", "mypy-extensions",
	}
}

func commitAreas() []string {
	return []string{"api", "billing", "checkout", "auth", "ci", "deps", "infra", "search", "ui", "docs", "orders", "ledger", "notifications"}
}

func commitVerbs() []string {
	return []string{"fix", "add", "remove", "rename", "refactor", "document", "speed up", "retry", "validate", "log", "cache", "paginate"}
}

func commitObjs() []string {
	return []string{
		"refund rounding for JPY", "password reset email template", "token refresh race on expiry", "API key rotation docs",
		"secret manager lookup timeout", "keyboard navigation in the cart drawer", "primary key on order_items",
		"webhook signature check", "session cookie SameSite attribute", "rate limiter for login attempts",
		"CSV export of invoices", "flaky checkout e2e test", "N+1 query in order list", "stale cache after price change",
		"missing index on customers.email", "OIDC discovery caching", "retry budget for outbox relay",
		"token_count in usage report", "Dockerfile to distroless base", "helm chart probes",
	}
}

func changedFiles() []string {
	return []string{
		"internal/orders/service.go", "internal/orders/service_test.go", "internal/auth/session.go", "cmd/api/main.go",
		"web/src/components/CartDrawer.tsx", "web/src/pages/Checkout.tsx", "billing/views.py", "billing/tests/test_refunds.py",
		"deploy/helm/values.yaml", "docs/operations/rotation.md", ".github/workflows/ci.yaml", "go.mod", "go.sum",
		"package.json", "package-lock.json", "migrations/0042_order_items_pk.sql", "Dockerfile", "README.md",
	}
}

func loremWords() []string {
	return strings.Fields(`lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore
	et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip ex ea commodo
	consequat duis aute irure in reprehenderit voluptate velit esse cillum fugiat nulla pariatur excepteur sint
	occaecat cupidatat non proident sunt culpa qui officia deserunt mollit anim id est laborum`)
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// fill calls line until the builder holds at least size bytes.
func fill(size int, line func(b *strings.Builder)) string {
	var b strings.Builder
	for b.Len() < size {
		line(&b)
	}
	return b.String()
}

// clock is a monotonically advancing timestamp source for one file.
type clock struct {
	t time.Time
	r *rand.Rand
}

func newClock(r *rand.Rand) *clock {
	return &clock{t: time.Date(2025, time.February, 3, 7, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(200*24)) * time.Hour), r: r}
}

func (c *clock) next(max time.Duration) time.Time {
	c.t = c.t.Add(time.Duration(1 + c.r.Int64N(int64(max))))
	return c.t
}

func email(name string) string {
	parts := strings.Fields(strings.ToLower(name))
	return strings.NewReplacer("á", "a", "é", "e", "ó", "o").Replace(parts[0]+"."+parts[len(parts)-1]) + "@northwind.io"
}

func uuidTable(r *rand.Rand) string {
	statuses := []string{"active", "active", "active", "suspended", "pending", "revoked"}
	c := newClock(r)
	var b strings.Builder
	b.WriteString("analytics=> SELECT id, tenant_id, api_key_id, status, created_at FROM integrations ORDER BY created_at LIMIT 400;\n")
	b.WriteString("                  id                  |              tenant_id               |              api_key_id              |  status   |          created_at\n")
	b.WriteString("--------------------------------------+--------------------------------------+--------------------------------------+-----------+-------------------------------\n")
	tenants := make([]string, 12)
	for i := range tenants {
		tenants[i] = uuid(r)
	}
	for range 400 {
		fmt.Fprintf(&b, " %s | %s | %s | %-9s | %s\n", uuid(r), pick(r, tenants), uuid(r), pick(r, statuses),
			c.next(40*time.Minute).Format("2006-01-02 15:04:05.000000-07"))
	}
	b.WriteString("(400 rows)\n\n")
	b.WriteString("analytics=> SELECT request_id, trace_id, span_id FROM request_log LIMIT 200;\n")
	b.WriteString("              request_id              |             trace_id             |     span_id\n")
	b.WriteString("--------------------------------------+----------------------------------+------------------\n")
	for range 200 {
		fmt.Fprintf(&b, " %s | %s | %s\n", uuid(r), hexs(r, 32), hexs(r, 16))
	}
	b.WriteString("(200 rows)\n")
	return b.String()
}

func gitLog(r *rand.Rand) string {
	c := newClock(r)
	return fill(120<<10, func(b *strings.Builder) {
		author := pick(r, people())
		t := c.next(9 * time.Hour).In(time.FixedZone("", 3600))
		fmt.Fprintf(b, "commit %s\n", hexs(r, 40))
		merge := r.IntN(6) == 0
		if merge {
			fmt.Fprintf(b, "Merge: %s %s\n", hexs(r, 7), hexs(r, 7))
		}
		fmt.Fprintf(b, "Author: %s <%s>\nDate:   %s\n\n", author, email(author), t.Format("Mon Jan 2 15:04:05 2006 -0700"))
		if merge {
			fmt.Fprintf(b, "    Merge pull request #%d from northwind/%s-%d\n\n    %s: %s %s\n\n", 1000+r.IntN(3000),
				pick(r, commitAreas()), r.IntN(900), pick(r, commitAreas()), pick(r, commitVerbs()), pick(r, commitObjs()))
			return
		}
		fmt.Fprintf(b, "    %s: %s %s\n\n", pick(r, commitAreas()), pick(r, commitVerbs()), pick(r, commitObjs()))
		if r.IntN(2) == 0 {
			fmt.Fprintf(b, "    The previous behaviour %s when the %s. This keeps the\n    old code path behind a flag until the %s rollout finishes.\n\n",
				pick(r, []string{"dropped the request", "logged twice", "returned a 500", "retried forever", "ignored the locale"}),
				pick(r, []string{"token expired mid-request", "password reset link was reused", "cache was cold", "key ring rotated", "tenant had no region"}),
				pick(r, []string{"checkout v2", "ledger", "search", "notifications"}))
		}
		if r.IntN(3) == 0 {
			fmt.Fprintf(b, "    Change-Id: I%s\n", hexs(r, 40))
		}
		fmt.Fprintf(b, "    Signed-off-by: %s <%s>\n", author, email(author))
		if r.IntN(4) == 0 {
			co := pick(r, people())
			fmt.Fprintf(b, "    Co-authored-by: %s <%s>\n", co, email(co))
		}
		b.WriteString("\n")
		n := 1 + r.IntN(4)
		ins, del := 0, 0
		for range n {
			a, d := r.IntN(80), r.IntN(40)
			ins += a
			del += d
			bar := strings.Repeat("+", min(a, 30)) + strings.Repeat("-", min(d, 20))
			fmt.Fprintf(b, " %-45s | %3d %s\n", pick(r, changedFiles()), a+d, bar)
		}
		plural := "s"
		if n == 1 {
			plural = ""
		}
		fmt.Fprintf(b, " %d file%s changed, %d insertions(+), %d deletions(-)\n\n", n, plural, ins, del)
	})
}

func checksums(r *rand.Rand) string {
	var b strings.Builder
	targets := []string{"linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64", "windows_amd64"}
	b.WriteString("$ sha256sum dist/*\n")
	for _, app := range []string{"orders-api", "ledger", "nwctl", "notifier", "edge-proxy"} {
		for minor := range 14 {
			for _, t := range targets {
				ext := ".tar.gz"
				if strings.HasPrefix(t, "windows") {
					ext = ".zip"
				}
				fmt.Fprintf(&b, "%s  dist/%s_2.%d.%d_%s%s\n", hexs(r, 64), app, minor, r.IntN(5), t, ext)
			}
		}
	}
	b.WriteString("\n$ sha512sum dist/*.deb\n")
	for i := range 40 {
		fmt.Fprintf(&b, "%s  dist/nwctl_2.%d.%d_amd64.deb\n", hexs(r, 128), i/3, i%3)
	}
	b.WriteString("\n$ cat SHA1SUMS\n")
	for i := range 60 {
		fmt.Fprintf(&b, "%s *firmware/board-rev%c-%02d.bin\n", hexs(r, 40), 'A'+rune(i%6), i)
	}
	b.WriteString("\n$ md5sum assets/fonts/*\n")
	for _, f := range []string{"Inter-Regular.woff2", "Inter-Medium.woff2", "Inter-SemiBold.woff2", "Inter-Bold.woff2", "JetBrainsMono-Regular.woff2"} {
		fmt.Fprintf(&b, "%s  assets/fonts/%s\n", hexs(r, 32), f)
	}
	return b.String()
}

func dockerPull(r *rand.Rand) string {
	images := []string{"ghcr.io/northwind/orders-api", "ghcr.io/northwind/ledger", "postgres", "redis", "grafana/grafana", "nginx", "python", "node"}
	tags := []string{"2.14.3", "1.21.0", "16-alpine", "7.4-alpine", "11.4.0", "1.27-alpine", "3.12-slim", "20-bookworm-slim"}
	return fill(36<<10, func(b *strings.Builder) {
		i := r.IntN(len(images))
		fmt.Fprintf(b, "$ docker pull %s:%s\n%s: Pulling from %s\n", images[i], tags[i], tags[i], strings.TrimPrefix(images[i], "ghcr.io/"))
		layers := 3 + r.IntN(8)
		for range layers {
			fmt.Fprintf(b, "%s: Pull complete\n", hexs(r, 12))
		}
		fmt.Fprintf(b, "Digest: sha256:%s\nStatus: Downloaded newer image for %s:%s\n", hexs(r, 64), images[i], tags[i])
		if r.IntN(3) == 0 {
			fmt.Fprintf(b, "\n$ docker images --digests %s\nREPOSITORY%sTAG%sDIGEST%sIMAGE ID       CREATED        SIZE\n", images[i],
				strings.Repeat(" ", 24), strings.Repeat(" ", 17), strings.Repeat(" ", 66))
			fmt.Fprintf(b, "%-34s%-20ssha256:%s   %s   %d days ago    %dMB\n", images[i], tags[i], hexs(r, 64), hexs(r, 12), 1+r.IntN(40), 40+r.IntN(900))
		}
		if r.IntN(3) == 0 {
			fmt.Fprintf(b, "\n$ docker inspect --format '{{json .RootFS.Layers}}' %s:%s\n[", images[i], tags[i])
			for j := range layers {
				if j > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(b, "\"sha256:%s\"", hexs(r, 64))
			}
			b.WriteString("]\n")
		}
		b.WriteString("\n")
	})
}

func packageLock(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString(`{
  "name": "northwind-web",
  "version": "3.8.0",
  "lockfileVersion": 3,
  "requires": true,
  "packages": {
    "": {
      "name": "northwind-web",
      "version": "3.8.0",
      "license": "UNLICENSED",
      "dependencies": {
        "@tanstack/react-query": "^5.62.7",
        "axios": "^1.7.9",
        "clsx": "^2.1.1",
        "date-fns": "^4.1.0",
        "react": "^18.3.1",
        "react-dom": "^18.3.1",
        "react-router-dom": "^6.28.0",
        "zod": "^3.24.1"
      },
      "devDependencies": {
        "@types/react": "^18.3.17",
        "eslint": "^9.17.0",
        "prettier": "^3.4.2",
        "tailwindcss": "^3.4.17",
        "typescript": "^5.7.2",
        "vite": "^6.0.3",
        "vitest": "^2.1.8"
      },
      "engines": {
        "node": ">=20"
      }
    }`)
	licenses := []string{"MIT", "MIT", "MIT", "ISC", "Apache-2.0", "BSD-3-Clause", "BSD-2-Clause"}
	seen := map[string]bool{}
	for b.Len() < 160<<10 {
		name := pick(r, npmPackages())
		path := "node_modules/" + name
		if seen[path] {
			path = "node_modules/" + pick(r, npmPackages()) + "/node_modules/" + name
		}
		if seen[path] {
			continue
		}
		seen[path] = true
		version := fmt.Sprintf("%d.%d.%d", r.IntN(10), r.IntN(30), r.IntN(20))
		base := name[strings.LastIndex(name, "/")+1:]
		fmt.Fprintf(&b, ",\n    %q: {\n      \"version\": %q,\n      \"resolved\": \"https://registry.npmjs.org/%s/-/%s-%s.tgz\",\n      \"integrity\": \"sha512-%s\",\n",
			path, version, name, base, version, base64.StdEncoding.EncodeToString(randBytes(r, 64)))
		if r.IntN(2) == 0 {
			b.WriteString("      \"dev\": true,\n")
		}
		if r.IntN(3) == 0 {
			deps := r.Perm(len(npmPackages()))[:1+r.IntN(4)]
			b.WriteString("      \"dependencies\": {\n")
			for k, d := range deps {
				sep := ","
				if k == len(deps)-1 {
					sep = ""
				}
				fmt.Fprintf(&b, "        %q: \"^%d.%d.%d\"%s\n", npmPackages()[d], r.IntN(10), r.IntN(30), r.IntN(20), sep)
			}
			b.WriteString("      },\n")
		}
		if r.IntN(3) == 0 {
			fmt.Fprintf(&b, "      \"engines\": {\n        \"node\": \">=%d\"\n      },\n", []int{8, 12, 14, 16, 18}[r.IntN(5)])
		}
		fmt.Fprintf(&b, "      \"license\": %q\n    }", pick(r, licenses))
	}
	b.WriteString("\n  }\n}\n")
	return b.String()
}

package main

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// minifiedJS writes a webpack-style production bundle: numbered modules of minified React
// components, hooks and utilities with the short identifiers, UI strings, SVG paths and colours
// that real bundles carry.
func minifiedJS(r *rand.Rand) string {
	components := []string{"Button", "Modal", "CartDrawer", "PriceTag", "Avatar", "Tooltip", "Tabs", "Toast", "SearchBox",
		"OrderRow", "ApiKeyList", "PasswordField", "TokenUsageChart", "KeyboardShortcuts", "SettingsPanel", "Pagination"}
	props := []string{"className", "children", "onClick", "disabled", "variant", "size", "title", "open", "onClose",
		"value", "onChange", "placeholder", "items", "loading", "label", "icon"}
	strs := []string{"Reset password", "Forgot your password?", "Your session has expired. Please sign in again.",
		"API keys", "Create API key", "Revoke key", "Copy to clipboard", "Copied!", "Keyboard shortcuts",
		"Show password", "Hide password", "Token usage this month", "Sign in with SSO", "Add to cart", "Checkout",
		"Order placed", "Something went wrong", "Try again", "Loading…", "No results", "Secret scanning is enabled for this project",
		"Password must be at least 12 characters", "Two-factor authentication", "Primary key", "Access token expires in %s"}
	classes := []string{"btn", "btn-primary", "btn-ghost", "modal__overlay", "drawer", "price", "avatar", "tooltip",
		"tabs__list", "toast", "toast--error", "search", "row", "sr-only", "flex items-center gap-2", "text-sm text-gray-500"}
	paths := []string{"M12 2C6.48 2 2 6.48 2 12s4.48 10 10 10 10-4.48 10-10S17.52 2 12 2zm1 15h-2v-6h2v6zm0-8h-2V7h2v2z",
		"M19 13h-6v6h-2v-6H5v-2h6V5h2v6h6v2z", "M9 16.17 4.83 12l-1.42 1.41L9 19 21 7l-1.41-1.41z",
		"M18 8h-1V6c0-2.76-2.24-5-5-5S7 3.24 7 6v2H6c-1.1 0-2 .9-2 2v10c0 1.1.9 2 2 2h12c1.1 0 2-.9 2-2V10c0-1.1-.9-2-2-2z",
		"M7 18c-1.1 0-1.99.9-1.99 2S5.9 22 7 22s2-.9 2-2-.9-2-2-2zM1 2v2h2l3.6 7.59-1.35 2.45c-.16.28-.25.61-.25.96 0 1.1.9 2 2 2h12v-2H7.42"}
	colors := []string{"#1f2937", "#6b7280", "#e5e7eb", "#2563eb", "#dc2626", "#16a34a", "#f59e0b", "#111827", "#f9fafb"}
	mods := []func() string{
		func() string {
			c := pick(r, components)
			return fmt.Sprintf(`function(e,t,n){"use strict";n.d(t,{Z:function(){return i}});var r=n(%d),o=n(%d),a=n.n(o);function i(e){var t=e.%s,n=e.%s,i=e.%s,u=void 0===i?"%s":i;return(0,r.jsx)("div",{className:a()("%s",t),"data-testid":"%s",children:(0,r.jsxs)("span",{className:"%s",children:[n," ",u]})})}i.displayName="%s"}`,
				r.IntN(9000), r.IntN(9000), pick(r, props), pick(r, props), pick(r, props), pick(r, strs), pick(r, classes), strings.ToLower(c), pick(r, classes), c)
		},
		func() string {
			return fmt.Sprintf(`function(e,t,n){"use strict";n.d(t,{a:function(){return l}});var r=n(%d),o=n(%d);function l(e,t){var n=(0,r.useState)(t),l=n[0],i=n[1];return(0,r.useEffect)((function(){var n=window.localStorage.getItem(e);null!==n&&i(JSON.parse(n))}),[e]),(0,r.useEffect)((function(){window.localStorage.setItem(e,JSON.stringify(l))}),[e,l]),[l,i,(0,o.Z)(%d)]}}`,
				r.IntN(9000), r.IntN(9000), 100+r.IntN(900))
		},
		func() string {
			return fmt.Sprintf(`function(e,t,n){"use strict";var r=n(%d);t.Z=function(e){return(0,r.jsx)("svg",{xmlns:"http://www.w3.org/2000/svg",viewBox:"0 0 24 24",width:e.size||%d,height:e.size||%d,fill:"%s","aria-hidden":!0,children:(0,r.jsx)("path",{d:"%s"})})}}`,
				r.IntN(9000), 16+4*r.IntN(3), 16+4*r.IntN(3), pick(r, colors), pick(r, paths))
		},
		func() string {
			return fmt.Sprintf(`function(e,t,n){"use strict";n.d(t,{Fz:function(){return s},Pc:function(){return c}});var r=n(%d),o=n.n(r),a=/^[a-zA-Z0-9._%%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$/,i={minLength:%d,requireDigit:!0,requireSymbol:!1};function s(e){return a.test(String(e).trim().toLowerCase())}function c(e){var t=[];return e.length<i.minLength&&t.push("%s"),i.requireDigit&&!/\d/.test(e)&&t.push("password_digit"),o()(t)}}`,
				r.IntN(9000), 8+r.IntN(8), pick(r, strs))
		},
		func() string {
			return fmt.Sprintf(`function(e,t,n){"use strict";n.d(t,{h:function(){return u}});var r=n(%d),o=n(%d);function u(e){var t=e.page,n=void 0===t?1:t,u=e.perPage,c=void 0===u?%d:u;return(0,o.a)({queryKey:["%s",n,c],queryFn:function(){return r.Z.get("/v1/%s",{params:{page:n,per_page:c}}).then((function(e){return e.data}))},staleTime:%d,retry:function(e,t){return e<3&&401!==(null==t?void 0:t.status)}})}}`,
				r.IntN(9000), r.IntN(9000), 10*(1+r.IntN(5)), pick(r, []string{"orders", "customers", "api-keys", "invoices", "products"}),
				pick(r, []string{"orders", "customers", "api_keys", "invoices", "products"}), 1000*(5+r.IntN(60)))
		},
		func() string {
			return fmt.Sprintf(`function(e){"use strict";e.exports=JSON.parse('{"name":"%s","version":"%d.%d.%d","locale":"%s","messages":{"auth.reset":"%s","auth.expired":"%s","keys.title":"API keys","keys.create":"Create API key"}}')}`,
				pick(r, []string{"storefront", "admin", "checkout"}), r.IntN(9), r.IntN(30), r.IntN(20), pick(r, []string{"en-US", "nl-NL", "de-DE"}), pick(r, strs), pick(r, strs))
		},
		func() string {
			return fmt.Sprintf(`function(e,t,n){"use strict";var r=n(%d),o={base:"%s",muted:"%s",border:"%s",accent:"%s",danger:"%s"};t.Z=(0,r.ZP)("button")(function(e){var t=e.variant;return{display:"inline-flex",alignItems:"center",gap:%d,padding:"%dpx %dpx",borderRadius:%d,border:"1px solid "+o.border,color:"primary"===t?"#fff":o.base,background:"primary"===t?o.accent:"transparent",cursor:"pointer","&:disabled":{opacity:.5,cursor:"not-allowed"},"&:focus-visible":{outline:"2px solid "+o.accent}}})}`,
				r.IntN(9000), pick(r, colors), pick(r, colors), pick(r, colors), pick(r, colors), pick(r, colors), 4+r.IntN(8), 4+r.IntN(8), 8+r.IntN(12), 4+r.IntN(8))
		},
		func() string {
			return fmt.Sprintf(`function(e,t,n){"use strict";n.d(t,{K:function(){return o}});var r={Escape:"close",ArrowUp:"prev",ArrowDown:"next",Enter:"select","?":"help",k:"search"};function o(e){return function(t){var n=t.metaKey||t.ctrlKey?"mod+"+t.key:t.key,o=r[n]||r[t.key];o&&"function"==typeof e[o]&&(t.preventDefault(),e[o](t))}}}`)
		},
	}
	var b strings.Builder
	b.WriteString(`/*! For license information please see main.3f9a1c2b.js.LICENSE.txt */` + "\n")
	b.WriteString(`(self.webpackChunknorthwind_web=self.webpackChunknorthwind_web||[]).push([[179],{`)
	first := true
	for b.Len() < 160<<10 {
		if !first {
			b.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&b, "%d:%s", 1000+r.IntN(9000), pick(r, mods)())
	}
	b.WriteString(`},function(e){var t=function(t){return e(e.s=t)};e.O(0,[216,736],(function(){return t(4231),t(8818)}));var n=e.O();_N_E=n}]);` + "\n")
	b.WriteString("//# sourceMappingURL=main.3f9a1c2b.js.map\n")
	return b.String()
}

func helpCenter(r *rand.Rand) string {
	articles := []struct{ title, body string }{
		{"Resetting your password", "If you forgot your password, choose \"Forgot your password?\" on the sign-in page and enter the email address on your account. We send a password reset email that stays valid for 30 minutes. For security, the link works once; request a new one if it expired. Support staff will never ask you for your password, a one-time code or a recovery key."},
		{"Creating and rotating API keys", "Administrators can create API keys under Settings → Developers → API keys. A key is shown once, right after you create it, so store it in your secret manager straight away. Give each integration its own key, rotate keys at least every 90 days and revoke keys you no longer use. The key list shows the last four characters and the date each key was last used."},
		{"Understanding token usage", "Each assistant reply consumes tokens. The usage page shows input tokens, output tokens and cached tokens per day. A token is roughly four characters of English text. Your plan includes a monthly token budget; when you reach 80 percent we send a notification to workspace owners."},
		{"Keyboard shortcuts", "Press ? anywhere to see every keyboard shortcut. Use Ctrl+K (Cmd+K on macOS) to open search, G then O to jump to orders and Esc to close dialogs. Shortcuts that change data ask for confirmation first."},
		{"Single sign-on", "Enterprise workspaces can sign in through their identity provider with SAML or OpenID Connect. After you enable SSO, members keep their existing password until you enforce SSO, at which point password sign-in is disabled for everyone except the break-glass owner account."},
		{"Where secrets are stored", "Webhook signing secrets and integration credentials are encrypted at rest with per-tenant keys held in a hardware security module. They never appear in exports, audit logs or support tooling; audit entries record only which key was used and when."},
	}
	var b strings.Builder
	for b.Len() < 48<<10 {
		a := pick(r, articles)
		fmt.Fprintf(&b, "%s\n%s\n\n%s\n\n", a.title, strings.Repeat("=", len(a.title)), a.body)
		// Placeholder Latin the docs team leaves in drafts.
		for range 1 + r.IntN(2) {
			n := 40 + r.IntN(60)
			words := make([]string, n)
			for i := range words {
				words[i] = pick(r, loremWords())
			}
			words[0] = strings.ToUpper(words[0][:1]) + words[0][1:]
			b.WriteString(strings.Join(words, " ") + ".\n\n")
		}
	}
	return b.String()
}

// nodeID returns a GitHub legacy global node id: base64 of "<len>:<Type><id>".
func nodeID(typ string, id int) string {
	s := fmt.Sprintf("%s%d", typ, id)
	return base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("%02d:%s", len(typ), s)))
}

func githubIssues(r *rand.Rand) string {
	c := newClock(r)
	users := []string{"maria-lopez", "junchen", "priya-r", "dokafor", "sofia-rossi", "larsn", "dependabot[bot]"}
	labels := []string{"bug", "enhancement", "security", "documentation", "good first issue", "area/auth", "area/billing"}
	titles := []string{"Password reset email arrives after the link expired", "Token usage chart shows the previous month",
		"Rotate API keys without downtime", "Keyboard shortcut ? does not open help on Firefox", "Checkout fails for JPY totals",
		"Add primary_key option to the CSV importer", "Session expires while the cart drawer is open",
		"Document where webhook secrets are stored", "Bump axios from 1.7.7 to 1.7.9", "Search ignores accents"}
	var b strings.Builder
	b.WriteString("[\n")
	for i := range 60 {
		num := 4200 - i
		id := 2600000000 + r.IntN(90000000)
		user := pick(r, users)
		uid := 1000000 + r.IntN(90000000)
		created := c.next(6 * time.Hour)
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, `  {
    "url": "https://api.github.com/repos/northwind/storefront/issues/%[1]d",
    "repository_url": "https://api.github.com/repos/northwind/storefront",
    "labels_url": "https://api.github.com/repos/northwind/storefront/issues/%[1]d/labels{/name}",
    "comments_url": "https://api.github.com/repos/northwind/storefront/issues/%[1]d/comments",
    "html_url": "https://github.com/northwind/storefront/issues/%[1]d",
    "id": %[2]d,
    "node_id": "I_kwDO%[3]s",
    "number": %[1]d,
    "title": %[4]q,
    "user": {
      "login": %[5]q,
      "id": %[6]d,
      "node_id": %[7]q,
      "avatar_url": "https://avatars.githubusercontent.com/u/%[6]d?v=4",
      "gravatar_id": "",
      "url": "https://api.github.com/users/%[5]s",
      "type": "User",
      "site_admin": false
    },
    "labels": [
      {
        "id": %[8]d,
        "node_id": "LA_kwDO%[9]s",
        "name": %[10]q,
        "color": "%[11]s",
        "default": false
      }
    ],
    "state": %[12]q,
    "locked": false,
    "comments": %[13]d,
    "created_at": %[14]q,
    "updated_at": %[15]q,
    "closed_at": null,
    "author_association": "MEMBER",
    "body": %[16]q,
    "reactions": {
      "total_count": %[17]d,
      "+1": %[17]d,
      "-1": 0,
      "heart": 0
    },
    "timeline_url": "https://api.github.com/repos/northwind/storefront/issues/%[1]d/timeline",
    "state_reason": null
  }`, num, id, chars(r, urlSafe, 10), pick(r, titles), user, uid, nodeID("User", uid), 5000000000+r.IntN(900000000),
			chars(r, urlSafe, 12), pick(r, labels), hexs(r, 6), pick(r, []string{"open", "open", "closed"}), r.IntN(12),
			created.Format(time.RFC3339), created.Add(time.Duration(r.IntN(72))*time.Hour).Format(time.RFC3339),
			pick(r, []string{
				"Steps to reproduce:\n1. Request a password reset\n2. Wait 35 minutes\n3. Click the link\n\nExpected: a clear message that the token expired.",
				"The usage page sums token_count from the previous billing period. See the query in usage/report.sql.",
				"We should support two active keys per integration so customers can rotate without downtime.",
				"Bumps [axios](https://github.com/axios/axios) from 1.7.7 to 1.7.9.\n\n<details><summary>Release notes</summary>Fix proxy handling for https targets.</details>",
				"The importer assumes the first column is the primary key. Add a primary_key option.",
			}), r.IntN(6))
	}
	b.WriteString("\n]\n")
	return b.String()
}

func apiEvents(r *rand.Rand) string {
	c := newClock(r)
	models := []string{"gpt-4o-mini-2024-07-18", "gpt-4o-2024-11-20"}
	replies := []string{"Your order has shipped and should arrive on Thursday.", "I can't find an order with that number. Could you check the confirmation email?",
		"To reset your password, use the link on the sign-in page; it stays valid for 30 minutes.", "The refund was issued to your original payment method."}
	return fill(64<<10, func(b *strings.Builder) {
		t := c.next(3 * time.Minute)
		switch r.IntN(3) {
		case 0:
			p, q := 200+r.IntN(3000), 10+r.IntN(300)
			fmt.Fprintf(b, `{"id":"chatcmpl-%s","object":"chat.completion","created":%d,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q,"refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}},"system_fingerprint":"fp_%s"}`+"\n",
				chars(r, alnum, 29), t.Unix(), pick(r, models), pick(r, replies), p, q, p+q, 64*r.IntN(20), hexs(r, 10))
		case 1:
			fmt.Fprintf(b, `{"id":"msg_01%s","type":"message","role":"assistant","model":"claude-3-5-haiku-20241022","content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d}}`+"\n",
				chars(r, alnum, 22), pick(r, replies), 100+r.IntN(2000), 10+r.IntN(200))
		default:
			fmt.Fprintf(b, `{"id":"evt_%s","object":"event","api_version":"2024-06-20","created":%d,"type":%q,"livemode":true,"pending_webhooks":1,"request":{"id":"req_%s","idempotency_key":%q},"data":{"object":{"id":"ch_%s","object":"charge","amount":%d,"currency":"eur","customer":"cus_%s","balance_transaction":"txn_%s","payment_intent":"pi_%s","paid":true,"refunded":false}}}`+"\n",
				chars(r, alnum, 24), t.Unix(), pick(r, []string{"charge.succeeded", "charge.refunded", "charge.captured"}), chars(r, alnum, 14), uuid(r),
				chars(r, alnum, 24), 500+r.IntN(90000), chars(r, alnum, 14), chars(r, alnum, 24), chars(r, alnum, 24))
		}
	})
}

func k8sManifests(r *rand.Rand) string {
	apps := []string{"orders-api", "ledger", "notifications", "search", "storefront", "edge-proxy", "reporting", "scheduler"}
	c := newClock(r)
	var b strings.Builder
	for b.Len() < 52<<10 {
		app := pick(r, apps)
		fmt.Fprintf(&b, `---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
  namespace: %[1]s
  labels:
    app.kubernetes.io/name: %[1]s
    app.kubernetes.io/version: "%[2]s"
spec:
  replicas: %[3]d
  selector:
    matchLabels:
      app.kubernetes.io/name: %[1]s
  template:
    metadata:
      labels:
        app.kubernetes.io/name: %[1]s
      annotations:
        checksum/config: %[4]s
        kubectl.kubernetes.io/restartedAt: "%[5]s"
    spec:
      serviceAccountName: %[1]s
      automountServiceAccountToken: false
      imagePullSecrets:
        - name: ghcr-pull
      containers:
        - name: %[1]s
          image: ghcr.io/northwind/%[1]s@sha256:%[6]s
          args: ["--config=/etc/%[1]s/config.yaml", "--log-format=json"]
          env:
            - name: DATABASE_PASSWORD
              valueFrom:
                secretKeyRef:
                  name: %[1]s-db
                  key: password
            - name: API_TOKEN_FILE
              value: /var/run/secrets/%[1]s/token
            - name: OTEL_EXPORTER_OTLP_ENDPOINT
              value: http://otel-collector.observability:4317
            - name: PASSWORD_RESET_TTL
              value: 30m
          envFrom:
            - configMapRef:
                name: %[1]s-config
          ports:
            - name: http
              containerPort: 8080
          livenessProbe:
            httpGet: {path: /healthz, port: http}
          resources:
            requests: {cpu: %[7]dm, memory: %[8]dMi}
            limits: {memory: %[9]dMi}
          volumeMounts:
            - name: token
              mountPath: /var/run/secrets/%[1]s
              readOnly: true
      volumes:
        - name: token
          projected:
            sources:
              - serviceAccountToken:
                  path: token
                  audience: vault
                  expirationSeconds: 3600
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: %[1]s-config
  namespace: %[1]s
data:
  LOG_LEVEL: info
  PRIMARY_KEY_STRATEGY: uuidv7
  TOKEN_AUDIENCE: vault
  KEYBOARD_LAYOUT_DEFAULT: us
  SECRET_STORE: vault
  VAULT_ROLE: %[1]s
  FEATURE_FLAGS: "checkout_v2,search_synonyms"
`, app, fmt.Sprintf("%d.%d.%d", 1+r.IntN(3), r.IntN(20), r.IntN(9)), 2+r.IntN(4), hexs(r, 64),
			c.next(time.Hour).Format(time.RFC3339), hexs(r, 64), 50*(1+r.IntN(8)), 128*(1+r.IntN(4)), 256*(1+r.IntN(4)))
	}
	return b.String()
}

func nginxAccess(r *rand.Rand) string {
	c := newClock(r)
	paths := []string{"/", "/products/standing-desk", "/products?category=office&page=%d", "/cart", "/checkout/shipping",
		"/account/orders?page=%d", "/account/reset-password?sent=1", "/api/v1/search?q=garden+hose&limit=%d",
		"/static/js/main.%s.js", "/static/css/main.%s.css", "/images/products/%s_800w.webp", "/favicon.ico",
		"/robots.txt", "/sitemap.xml", "/healthz", "/api/v1/orders/%d", "/blog/keyboard-shortcuts-for-power-users",
		"/help/articles/creating-and-rotating-api-keys", "/oauth/authorize?client_id=storefront-web&response_type=code&scope=openid%%20profile&state=%s"}
	agents := []string{
		"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
		"Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
		"Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0",
		"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "kube-probe/1.31", "curl/8.5.0",
	}
	return fill(110<<10, func(b *strings.Builder) {
		p := pick(r, paths)
		switch {
		case strings.Contains(p, "%d"):
			p = fmt.Sprintf(p, 1+r.IntN(400))
		case strings.Contains(p, "%s"):
			p = fmt.Sprintf(p, hexs(r, 8+8*r.IntN(2)))
		}
		status := pick(r, []int{200, 200, 200, 200, 304, 301, 404, 499, 502})
		fmt.Fprintf(b, "%d.%d.%d.%d - - [%s] \"%s %s HTTP/%s\" %d %d \"%s\" \"%s\" \"-\" %0.3f\n",
			pick(r, []int{31, 62, 77, 84, 145, 185, 213}), r.IntN(256), r.IntN(256), 1+r.IntN(254),
			c.next(1500*time.Millisecond).Format("02/Jan/2006:15:04:05 -0700"), pick(r, []string{"GET", "GET", "GET", "POST", "HEAD"}),
			p, pick(r, []string{"1.1", "2.0"}), status, 100+r.IntN(60000),
			pick(r, []string{"-", "https://shop.northwind.io/", "https://www.google.com/", "https://shop.northwind.io/cart"}),
			pick(r, agents), r.Float64()*0.8)
	})
}

func stackTraces(r *rand.Rand) string {
	var b strings.Builder
	for b.Len() < 60<<10 {
		switch r.IntN(3) {
		case 0:
			fmt.Fprintf(&b, "panic: runtime error: index out of range [%d] with length %d\n\ngoroutine %d [running]:\n", r.IntN(9), r.IntN(5), 1+r.IntN(400))
			for range 4 + r.IntN(6) {
				fn := pick(r, []string{"internal/orders.(*Service).Reserve", "internal/auth.(*TokenCache).Get", "internal/ledger.postEntries",
					"net/http.HandlerFunc.ServeHTTP", "github.com/go-chi/chi/v5.(*Mux).routeHTTP", "internal/search.(*Index).Query"})
				fmt.Fprintf(&b, "github.com/northwind/api/%s(0xc%09x, {0x%x, 0xc%09x}, 0x%x)\n\t/src/%s.go:%d +0x%x\n",
					fn, r.IntN(1<<36), 0x900000+r.IntN(0xfffff), r.IntN(1<<36), r.IntN(4096), strings.ToLower(strings.Split(fn, ".")[0]), 20+r.IntN(400), r.IntN(0x400))
			}
			fmt.Fprintf(&b, "created by net/http.(*Server).Serve in goroutine 1\n\t/usr/local/go/src/net/http/server.go:3360 +0x485\nexit status 2\n\n")
		case 1:
			b.WriteString("Traceback (most recent call last):\n")
			for range 3 + r.IntN(5) {
				fmt.Fprintf(&b, "  File \"/app/%s.py\", line %d, in %s\n    %s\n", pick(r, []string{"billing/views", "billing/services/refunds", "accounts/tokens", "reports/tasks", "search/indexer"}),
					10+r.IntN(400), pick(r, []string{"post", "issue_refund", "refresh_token", "build_daily_sales", "reindex"}),
					pick(r, []string{"return self.handle(request, *args, **kwargs)", "amount = quantize(total, currency)", "token = self.cache.get(key)", "rows = cursor.fetchall()", "self.client.bulk(actions, chunk_size=500)"}))
			}
			b.WriteString(pick(r, []string{"KeyError: 'primary_key'", "decimal.InvalidOperation: [<class 'decimal.ConversionSyntax'>]", "TimeoutError: token refresh timed out after 5.0s",
				"psycopg.errors.UniqueViolation: duplicate key value violates unique constraint \"orders_pkey\"", "ValueError: password reset token has expired"}) + "\n\n")
		default:
			fmt.Fprintf(&b, "Exception in thread \"%s\" java.lang.IllegalStateException: %s\n", pick(r, []string{"main", "http-nio-8080-exec-4", "scheduling-1"}),
				pick(r, []string{"Connection pool shut down", "Key store not initialized", "Token endpoint returned 503", "No primary key defined for entity Order"}))
			for range 5 + r.IntN(8) {
				fmt.Fprintf(&b, "\tat %s.%s(%s.java:%d)\n", pick(r, []string{"com.northwind.inventory.service.StockService", "org.springframework.web.servlet.FrameworkServlet",
					"org.apache.catalina.core.ApplicationFilterChain", "com.zaxxer.hikari.pool.HikariPool", "org.hibernate.internal.SessionImpl"}),
					pick(r, []string{"reserve", "doFilter", "service", "getConnection", "persist"}), pick(r, []string{"StockService", "FrameworkServlet", "ApplicationFilterChain", "HikariPool", "SessionImpl"}), 40+r.IntN(900))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func npmInstall(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString("$ npm ci\n")
	for range 30 {
		fmt.Fprintf(&b, "npm warn deprecated %s@%d.%d.%d: %s\n", pick(r, npmPackages()), r.IntN(9), r.IntN(20), r.IntN(10),
			pick(r, []string{"This module is not supported, and leaks memory. Do not use it.", "Rimraf versions prior to v4 are no longer supported",
				"Glob versions prior to v9 are no longer supported", "Use your platform's native DOMException instead", "Please upgrade to version 7 or higher."}))
	}
	fmt.Fprintf(&b, "\n> northwind-web@3.8.0 prepare\n> husky\n\n\nadded %d packages, and audited %d packages in %ds\n\n%d packages are looking for funding\n  run `npm fund` for details\n\n", 1200+r.IntN(400), 1200+r.IntN(400), 10+r.IntN(40), 100+r.IntN(200))
	b.WriteString("# npm audit report\n\n")
	for range 12 {
		p := pick(r, npmPackages())
		fmt.Fprintf(&b, "%s  <%d.%d.%d\nSeverity: %s\n%s - https://github.com/advisories/GHSA-%s-%s-%s\nfix available via `npm audit fix`\nnode_modules/%s\n\n",
			p, r.IntN(9), r.IntN(20), r.IntN(10), pick(r, []string{"moderate", "high", "low"}),
			pick(r, []string{"Regular Expression Denial of Service", "Prototype Pollution", "Server-Side Request Forgery", "Inefficient Regular Expression Complexity"}),
			chars(r, "23456789cfghjmpqrvwx", 4), chars(r, "23456789cfghjmpqrvwx", 4), chars(r, "23456789cfghjmpqrvwx", 4), p)
	}
	b.WriteString("12 vulnerabilities (7 moderate, 5 high)\n\n$ npm ls --depth=0\n")
	for range 40 {
		fmt.Fprintf(&b, "├── %s@%d.%d.%d\n", pick(r, npmPackages()), r.IntN(9), r.IntN(30), r.IntN(20))
	}
	return b.String()
}

func pipInstall(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString("$ pip install --require-hashes -r requirements.lock\n")
	for _, p := range pyPackages() {
		v := fmt.Sprintf("%d.%d.%d", r.IntN(6), r.IntN(30), r.IntN(12))
		file := strings.ReplaceAll(p, "-", "_") + "-" + v + "-py3-none-any.whl"
		fmt.Fprintf(&b, "Collecting %s==%s (from -r requirements.lock (line %d))\n  Downloading https://files.pythonhosted.org/packages/%s/%s/%s/%s (%d kB)\n",
			p, v, 1+r.IntN(200), hexs(r, 2), hexs(r, 2), hexs(r, 60), file, 10+r.IntN(900))
	}
	b.WriteString("Installing collected packages: " + strings.Join(pyPackages(), ", ") + "\n")
	b.WriteString("Successfully installed " + strings.Join(pyPackages(), " ") + "\n\n$ cat requirements.lock\n")
	for _, p := range pyPackages() {
		fmt.Fprintf(&b, "%s==%d.%d.%d \\\n    --hash=sha256:%s \\\n    --hash=sha256:%s\n", p, r.IntN(6), r.IntN(30), r.IntN(12), hexs(r, 64), hexs(r, 64))
	}
	return b.String()
}

func placeholders(r *rand.Rand) string {
	return `# .env.example — copy to .env and fill in real values from the password manager.
# Never commit the filled-in file.

APP_ENV=development
APP_URL=http://localhost:3000

# Database: the password comes from the environment of the shell or the secret store.
DB_HOST=localhost
DB_USER=app
DB_PASSWORD=${DB_PASSWORD}
DATABASE_URL=postgres://app:${DB_PASSWORD}@localhost:5432/app
REDIS_URL=redis://localhost:6379/0

# Third-party services
OPENAI_API_KEY=<your-api-key>
ANTHROPIC_API_KEY=<your-anthropic-api-key>
STRIPE_SECRET_KEY=<stripe-secret-key-from-dashboard>
SENDGRID_API_KEY=your-sendgrid-api-key-here
AWS_ACCESS_KEY_ID=
AWS_SECRET_ACCESS_KEY=
GITHUB_TOKEN=${{ secrets.GITHUB_TOKEN }}
SLACK_WEBHOOK_URL=https://hooks.slack.com/services/<workspace>/<channel>/<token>

# Generate with: openssl rand -base64 32
SESSION_SECRET=$(openssl rand -base64 32)
JWT_SECRET=<generate-a-random-secret>

# Shown in the UI; not secret.
PUBLIC_SUPPORT_EMAIL=support@northwind.io
PASSWORD_MIN_LENGTH=12
TOKEN_TTL_SECONDS=900
API_KEY_HEADER=X-Api-Key
PRIMARY_KEY_TYPE=uuid
SECRET_STORE_BACKEND=vault
KEYBOARD_SHORTCUTS_ENABLED=true

# ---- Helm values template (deploy/helm/templates/secret.yaml) ----
# stringData:
#   DB_PASSWORD: {{ .Values.db.password | quote }}
#   OPENAI_API_KEY: {{ required "openai.apiKey is required" .Values.openai.apiKey | quote }}
#
# ---- docker compose ----
# environment:
#   POSTGRES_PASSWORD_FILE: /run/secrets/postgres_password
#   GF_SECURITY_ADMIN_PASSWORD__FILE: /run/secrets/grafana_admin_password
#
# ---- redacted output from "heroku config" as pasted in the runbook ----
# DATABASE_URL:     postgres://u***:*****@ec2-***.compute-1.amazonaws.com:5432/d***
# REDIS_URL:        [REDACTED]
# SENDGRID_API_KEY: SG.****************
# STRIPE_SECRET_KEY: sk_live_…(hidden)
#
# curl examples from the API docs:
#   curl -H "Authorization: Bearer $API_TOKEN" https://api.northwind.io/v1/orders
#   curl -u "$API_USER:$API_PASSWORD" https://api.northwind.io/v1/export
#   curl -H 'X-Api-Key: <your-api-key>' https://api.northwind.io/v1/ping
` + fmt.Sprintf("# example request id: %s\n", uuid(r))
}

func terraformPlan(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString("Terraform used the selected providers to generate the following execution plan. Resource actions are\nindicated with the following symbols:\n  + create\n  ~ update in-place\n\nTerraform will perform the following actions:\n\n")
	n := 0
	for b.Len() < 34<<10 {
		n++
		name := pick(r, []string{"orders", "ledger", "reporting", "search", "notifications"})
		switch r.IntN(3) {
		case 0:
			fmt.Fprintf(&b, `  # aws_db_instance.%[1]s will be updated in-place
  ~ resource "aws_db_instance" "%[1]s" {
        id                          = "db-%[2]s"
      ~ instance_class              = "db.r6g.large" -> "db.r6g.xlarge"
        password                    = (sensitive value)
        username                    = "%[1]s_admin"
      ~ tags                        = {
          + "cost_center" = "cc-1042"
            # (2 unchanged elements hidden)
        }
        # (48 unchanged attributes hidden)
    }

`, name, chars(r, upperAlnum, 26))
		case 1:
			fmt.Fprintf(&b, `  # aws_security_group_rule.%[1]s_ingress[%[2]d] will be created
  + resource "aws_security_group_rule" "%[1]s_ingress" {
      + cidr_blocks              = [
          + "10.%[3]d.0.0/16",
        ]
      + from_port                = 443
      + id                       = (known after apply)
      + protocol                 = "tcp"
      + security_group_id        = "sg-0%[4]s"
      + security_group_rule_id   = (known after apply)
      + source_security_group_id = (known after apply)
      + to_port                  = 443
      + type                     = "ingress"
    }

`, name, r.IntN(4), r.IntN(255), hexs(r, 16))
		default:
			fmt.Fprintf(&b, `  # aws_secretsmanager_secret_version.%[1]s will be created
  + resource "aws_secretsmanager_secret_version" "%[1]s" {
      + arn            = (known after apply)
      + id             = (known after apply)
      + secret_id      = "arn:aws:secretsmanager:eu-west-1:%[2]s:secret:%[1]s/api-key-%[3]s"
      + secret_string  = (sensitive value)
      + version_id     = (known after apply)
      + version_stages = (known after apply)
    }

  # aws_instance.%[1]s_worker will be updated in-place
  ~ resource "aws_instance" "%[1]s_worker" {
      ~ ami                          = "ami-0%[4]s" -> "ami-0%[5]s"
        id                           = "i-0%[6]s"
        key_name                     = "ops-2024"
        # (31 unchanged attributes hidden)
    }

`, name, chars(r, digits, 12), chars(r, alnum, 6), hexs(r, 16), hexs(r, 16), hexs(r, 16))
		}
	}
	fmt.Fprintf(&b, "Plan: %d to add, %d to change, 0 to destroy.\n\nChanges to Outputs:\n  ~ db_password = (sensitive value)\n\nSaved the plan to: tfplan\n", n/2, n-n/2)
	return b.String()
}

func ciMasked(r *rand.Rand) string {
	c := newClock(r)
	ts := func() string { return c.next(900 * time.Millisecond).Format("2006-01-02T15:04:05.0000000Z") }
	var b strings.Builder
	for b.Len() < 26<<10 {
		fmt.Fprintf(&b, "%s ##[group]Run actions/cache@v4\n%s with:\n%s   path: ~/.npm\n%s   key: Linux-node-%s\n%s   restore-keys: Linux-node-\n%s ##[endgroup]\n",
			ts(), ts(), ts(), ts(), hexs(r, 64), ts(), ts())
		fmt.Fprintf(&b, "%s Received %d of %d (100.0%%), %.1f MBs/sec\n%s Cache Size: ~%d MB (%d B)\n%s Cache restored from key: Linux-node-%s\n",
			ts(), 90000000+r.IntN(9000000), 90000000+r.IntN(9000000), 50+r.Float64()*100, ts(), 80+r.IntN(20), 90000000+r.IntN(9000000), ts(), hexs(r, 64))
		fmt.Fprintf(&b, "%s ##[group]Run aws-actions/configure-aws-credentials@v4\n%s with:\n%s   role-to-assume: arn:aws:iam::%s:role/github-deploy\n%s   aws-region: eu-west-1\n%s ##[endgroup]\n%s Assuming role with OIDC\n%s Authenticated as assumedRoleId AROA%s:GitHubActions\n",
			ts(), ts(), ts(), chars(r, digits, 12), ts(), ts(), ts(), ts(), chars(r, base32Upper, 17))
		fmt.Fprintf(&b, "%s ##[group]Run docker/login-action@v3\n%s with:\n%s   registry: ghcr.io\n%s   username: northwind-ci\n%s   password: ***\n%s ##[endgroup]\n%s Login Succeeded!\n",
			ts(), ts(), ts(), ts(), ts(), ts(), ts())
		fmt.Fprintf(&b, "%s ##[group]Run npm publish\n%s env:\n%s   NODE_AUTH_TOKEN: ***\n%s   NPM_CONFIG_USERCONFIG: /home/runner/work/_temp/.npmrc\n%s ##[endgroup]\n%s npm notice Publishing to https://registry.npmjs.org/ with tag latest\n%s + @northwind/sdk@2.%d.%d\n",
			ts(), ts(), ts(), ts(), ts(), ts(), ts(), r.IntN(20), r.IntN(9))
		fmt.Fprintf(&b, "%s Run ID: %d, attempt %d, job %s\n%s Artifact ID is %d, digest sha256:%s\n",
			ts(), 10000000000+r.IntN(900000000), 1+r.IntN(2), uuid(r), ts(), 1000000000+r.IntN(900000000), hexs(r, 64))
	}
	return b.String()
}

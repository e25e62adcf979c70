package main

// logFiles are application, CI and proxy logs. Secret lines sit among ordinary lines in the
// order a real process would write them.
func logFiles() []positiveFile {
	return []positiveFile{
		{"positive/logs/orders-api.log", func(x *expander) string {
			noise := []string{
				`{"level":"info","ts":"«ts:iso»","caller":"httpserver/middleware.go:74","msg":"request completed","method":"GET","path":"/v1/orders/«num:100000:999999»","status":200,"bytes":«num:300:9000»,"duration":"«num:2:90».«num:0:9»ms","request_id":"«uuid»"}`,
				`{"level":"info","ts":"«ts:iso»","caller":"httpserver/middleware.go:74","msg":"request completed","method":"POST","path":"/v1/orders","status":201,"bytes":«num:300:2000»,"duration":"«num:20:400».«num:0:9»ms","request_id":"«uuid»"}`,
				`{"level":"info","ts":"«ts:iso»","caller":"httpserver/middleware.go:74","msg":"request completed","method":"GET","path":"/v1/customers/cus_«alnum:14»/orders?limit=20&starting_after=ord_«alnum:14»","status":200,"bytes":«num:300:9000»,"duration":"«num:2:90».«num:0:9»ms","request_id":"«uuid»"}`,
				`{"level":"warn","ts":"«ts:iso»","caller":"httpserver/middleware.go:81","msg":"request completed","method":"GET","path":"/v1/orders/«num:100000:999999»","status":404,"bytes":63,"duration":"«num:1:9».«num:0:9»ms","request_id":"«uuid»"}`,
				`{"level":"debug","ts":"«ts:iso»","caller":"orders/service.go:212","msg":"reserved stock","order_id":"ord_«alnum:14»","sku":"NW-«upper:4»-«num:100:999»","quantity":«num:1:6»,"warehouse":"«pick:ams1,fra2,dub1»"}`,
				`{"level":"info","ts":"«ts:iso»","caller":"outbox/relay.go:96","msg":"published events","topic":"orders.v1","count":«num:1:40»,"lag_ms":«num:0:900»}`,
				`{"level":"debug","ts":"«ts:iso»","caller":"db/pool.go:131","msg":"pool stats","acquired":«num:0:20»,"idle":«num:0:20»,"max":20,"wait_count":«num:0:12»}`,
				`{"level":"info","ts":"«ts:iso»","caller":"auth/jwks.go:58","msg":"refreshed signing keys","issuer":"https://login.northwind.io/","keys":2,"next_refresh":"«ts:iso»"}`,
				`{"level":"info","ts":"«ts:iso»","caller":"payments/stripe.go:140","msg":"payment intent confirmed","payment_intent":"pi_«alnum:24»","amount":«num:500:90000»,"currency":"eur","order_id":"ord_«alnum:14»"}`,
			}
			return x.expand(`{"level":"info","ts":"«ts:iso»","caller":"cmd/orders-api/main.go:52","msg":"starting orders-api","version":"2.14.3","commit":"«hex:40»","go":"go1.23.4"}
{"level":"info","ts":"«ts:iso»","caller":"db/pool.go:57","msg":"connecting to database","dsn":"postgres://orders:«postgres-password»@orders-db.internal:5432/orders?sslmode=verify-full&pool_max_conns=20"}
{"level":"info","ts":"«ts:iso»","caller":"httpserver/server.go:88","msg":"listening","addr":":8080"}
`) + x.lines(30, noise...) + x.expand(`{"level":"debug","ts":"«ts:iso»","caller":"httpserver/middleware.go:61","msg":"incoming request","method":"POST","path":"/v1/orders","headers":{"Accept":"application/json","Authorization":"Bearer «jwt»","Content-Type":"application/json","User-Agent":"northwind-ios/5.12.0 (iPhone; iOS 18.1; Scale/3.00)","X-Request-Id":"«uuid»"}}
`) + x.lines(25, noise...) + x.expand(`{"level":"debug","ts":"«ts:iso»","caller":"llm/client.go:88","msg":"outbound request","url":"https://api.anthropic.com/v1/messages","headers":{"Anthropic-Version":"2023-06-01","Content-Type":"application/json","X-Api-Key":"«anthropic-api-key»"},"body_bytes":«num:800:4000»}
{"level":"info","ts":"«ts:iso»","caller":"llm/client.go:131","msg":"summary generated","order_id":"ord_«alnum:14»","input_tokens":«num:300:3000»,"output_tokens":«num:40:400»,"latency_ms":«num:400:3000»}
`) + x.lines(25, noise...) + x.expand(`{"level":"warn","ts":"«ts:iso»","caller":"payments/stripe.go:171","msg":"stripe request failed, retrying","attempt":2,"error":"POST https://api.stripe.com/v1/refunds: 429 Too Many Requests","idempotency_key":"«uuid»","client":{"api_key":"«stripe-restricted-key»","api_version":"2024-06-20","max_retries":3}}
{"level":"info","ts":"«ts:iso»","caller":"payments/stripe.go:188","msg":"refund created","refund":"re_«alnum:24»","amount":«num:500:9000»}
`) + x.lines(20, noise...) + x.expand(`{"level":"info","ts":"«ts:iso»","caller":"integrations/shopify.go:44","msg":"shopify sync started","shop":"northwind-store.myshopify.com","request":{"method":"GET","url":"https://northwind-store.myshopify.com/admin/api/2024-10/orders.json?status=any&limit=250","header":{"Accept":["application/json"],"X-Shopify-Access-Token":["«shopify-access-token»"]}}}
{"level":"error","ts":"«ts:iso»","caller":"integrations/square.go:97","msg":"square refund replay failed","error":"401 UNAUTHORIZED: This request could not be authorized.","replay":"curl -X POST https://connect.squareup.com/v2/refunds -H 'Square-Version: 2024-10-17' -H 'Authorization: Bearer «square-access-token»' -H 'Content-Type: application/json' -d @refund-«num:1000:9999».json"}
`) + x.lines(20, noise...) + x.expand(`{"level":"debug","ts":"«ts:iso»","caller":"integrations/linear.go:63","msg":"created incident issue","issue":"OPS-«num:100:999»","client":{"endpoint":"https://api.linear.app/graphql","headers":{"Authorization":"«linear-api-key»","Content-Type":"application/json"}}}
`) + x.lines(15, noise...)
		}},

		{"positive/logs/github-actions-release.log", func(x *expander) string {
			return x.expand(`«ts:gha» Current runner version: '2.321.0'
«ts:gha» ##[group]Operating System
«ts:gha» Ubuntu
«ts:gha» 24.04.1
«ts:gha» LTS
«ts:gha» ##[endgroup]
«ts:gha» ##[group]Runner Image
«ts:gha» Image: ubuntu-24.04
«ts:gha» Version: 20250105.1.0
«ts:gha» ##[endgroup]
«ts:gha» Secret source: Actions
«ts:gha» Prepare workflow directory
«ts:gha» Prepare all required actions
«ts:gha» Getting action download info
«ts:gha» Download action repository 'actions/checkout@v4' (SHA:«hex:40»)
«ts:gha» Download action repository 'actions/setup-node@v4' (SHA:«hex:40»)
«ts:gha» Complete job name: publish
«ts:gha» ##[group]Run actions/checkout@v4
«ts:gha» with:
«ts:gha»   repository: northwind/sdk-js
«ts:gha»   token: ***
«ts:gha»   ssh-strict: true
«ts:gha»   persist-credentials: true
«ts:gha» ##[endgroup]
«ts:gha» Syncing repository: northwind/sdk-js
«ts:gha» [command]/usr/bin/git version
«ts:gha» git version 2.47.1
«ts:gha» [command]/usr/bin/git -c protocol.version=2 fetch --no-tags --prune --no-recurse-submodules --depth=1 origin +«hex:40»:refs/tags/v2.«num:0:20#minor».«num:0:9#patch»
«ts:gha» ##[group]Run npm ci
«ts:gha» npm ci
«ts:gha» shell: /usr/bin/bash -e {0}
«ts:gha» ##[endgroup]
«ts:gha» npm warn deprecated inflight@1.0.6: This module is not supported, and leaks memory. Do not use it.
«ts:gha» npm warn deprecated glob@7.2.3: Glob versions prior to v9 are no longer supported
«ts:gha» npm warn deprecated rimraf@3.0.2: Rimraf versions prior to v4 are no longer supported
«ts:gha» 
«ts:gha» added «num:900:1600#pkgs» packages, and audited «num:900:1600#pkgs» packages in «num:8:40»s
«ts:gha» 
«ts:gha» «num:100:300» packages are looking for funding
«ts:gha»   run ` + "`npm fund`" + ` for details
«ts:gha» 
«ts:gha» found 0 vulnerabilities
«ts:gha» ##[group]Run npm run build && npm test
«ts:gha» npm run build && npm test
«ts:gha» shell: /usr/bin/bash -e {0}
«ts:gha» ##[endgroup]
«ts:gha» 
«ts:gha» > @northwind/sdk@2.«num:0:20#minor».«num:0:9#patch» build
«ts:gha» > tsup src/index.ts --format cjs,esm --dts
«ts:gha» 
«ts:gha» CLI Building entry: src/index.ts
«ts:gha» CLI Using tsconfig: tsconfig.json
«ts:gha» CJS Build start
«ts:gha» ESM Build start
«ts:gha» CJS dist/index.js     «num:10:90».«num:10:99» KB
«ts:gha» CJS ⚡️ Build success in «num:20:90»ms
«ts:gha» ESM dist/index.mjs     «num:10:90».«num:10:99» KB
«ts:gha» ESM ⚡️ Build success in «num:20:90»ms
«ts:gha» DTS Build start
«ts:gha» DTS ⚡️ Build success in «num:900:4000»ms
«ts:gha» 
«ts:gha» > @northwind/sdk@2.«num:0:20#minor».«num:0:9#patch» test
«ts:gha» > vitest run
«ts:gha» 
«ts:gha»  RUN  v2.1.8 /home/runner/work/sdk-js/sdk-js
«ts:gha» 
«ts:gha»  ✓ src/client.test.ts («num:10:40» tests) «num:10:900»ms
«ts:gha»  ✓ src/retry.test.ts («num:3:20» tests) «num:10:900»ms
«ts:gha»  ✓ src/errors.test.ts («num:3:20» tests) «num:10:90»ms
«ts:gha»  ✓ src/paginate.test.ts («num:3:20» tests) «num:10:90»ms
«ts:gha»  ✓ src/webhooks.test.ts («num:3:20» tests) «num:10:300»ms
«ts:gha» 
«ts:gha»  Test Files  5 passed (5)
«ts:gha»       Tests  «num:40:110» passed («num:40:110»)
«ts:gha»    Duration  «num:2:9».«num:10:99»s
«ts:gha» ##[group]Run ./scripts/release.sh
«ts:gha» ./scripts/release.sh
«ts:gha» shell: /usr/bin/bash -e {0}
«ts:gha» env:
«ts:gha»   GH_APP_ID: 104217
«ts:gha»   NODE_VERSION: 20
«ts:gha» ##[endgroup]
«ts:gha» + set -x
«ts:gha» + VERSION=2.«num:0:20#minor».«num:0:9#patch»
«ts:gha» + git clone --depth 1 https://x-access-token:«github-app-token»@github.com/northwind/infra.git /tmp/infra
«ts:gha» Cloning into '/tmp/infra'...
«ts:gha» + echo //registry.npmjs.org/:_authToken=«npm-token»
«ts:gha» + npm publish --access public --provenance
«ts:gha» npm notice
«ts:gha» npm notice 📦  @northwind/sdk@2.«num:0:20#minor».«num:0:9#patch»
«ts:gha» npm notice Tarball Contents
«ts:gha» npm notice «num:1:9».«num:0:9»kB README.md
«ts:gha» npm notice «num:10:90».«num:0:9»kB dist/index.js
«ts:gha» npm notice Tarball Details
«ts:gha» npm notice name: @northwind/sdk
«ts:gha» npm notice shasum: «hex:40»
«ts:gha» npm notice integrity: sha512-«b64:64»
«ts:gha» npm notice total files: «num:8:30»
«ts:gha» npm notice Publishing to https://registry.npmjs.org/ with tag latest and public access
«ts:gha» + docker login -u northwindci -p «dockerhub-pat»
«ts:gha» WARNING! Using --password via the CLI is insecure. Use --password-stdin.
«ts:gha» Login Succeeded
«ts:gha» + docker buildx build --platform linux/amd64,linux/arm64 -t northwind/sdk-playground:2.«num:0:20#minor».«num:0:9#patch» --push .
«ts:gha» #1 [internal] load build definition from Dockerfile
«ts:gha» #1 DONE 0.0s
«ts:gha» #9 exporting manifest list sha256:«hex:64» done
«ts:gha» #9 pushing layers «num:2:9».«num:0:9»s done
«ts:gha» + python -m twine upload -u __token__ -p «pypi-token» dist/northwind_sdk-2.«num:0:20#minor».«num:0:9#patch»-py3-none-any.whl
«ts:gha» Uploading distributions to https://upload.pypi.org/legacy/
«ts:gha» Uploading northwind_sdk-2.«num:0:20#minor».«num:0:9#patch»-py3-none-any.whl
«ts:gha» 100% ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ «num:20:90».«num:0:9»/«num:20:90».«num:0:9» kB • 00:00 • ?
«ts:gha» View at:
«ts:gha» https://pypi.org/project/northwind-sdk/2.«num:0:20#minor».«num:0:9#patch»/
«ts:gha» + curl -fsSL -H 'Authorization: token «github-pat»' https://api.github.com/repos/northwind/sdk-js/releases/latest
«ts:gha» {
«ts:gha»   "url": "https://api.github.com/repos/northwind/sdk-js/releases/«num:100000000:199999999»",
«ts:gha»   "tag_name": "v2.«num:0:20#minor».«num:0:9#patch»",
«ts:gha»   "target_commitish": "main",
«ts:gha»   "draft": false,
«ts:gha»   "prerelease": false
«ts:gha» }
«ts:gha» + export TF_TOKEN_app_terraform_io=«terraform-cloud-token»
«ts:gha» + terraform -chdir=/tmp/infra/sdk-docs init -input=false
«ts:gha» Initializing HCP Terraform...
«ts:gha» HCP Terraform has been successfully initialized!
«ts:gha» + sentry-cli --auth-token «sentry-user-token» releases new -p sdk-js 2.«num:0:20#minor».«num:0:9#patch»
«ts:gha» Created release 2.«num:0:20#minor».«num:0:9#patch»
«ts:gha» ##[group]Run actions/upload-artifact@v4
«ts:gha» with:
«ts:gha»   name: dist
«ts:gha»   path: dist/
«ts:gha» ##[endgroup]
«ts:gha» With the provided path, there will be «num:5:20» files uploaded
«ts:gha» Artifact dist has been successfully uploaded! Final size is «num:100000:900000» bytes. Artifact ID is «num:1000000000:2000000000»
«ts:gha» Post job cleanup.
«ts:gha» [command]/usr/bin/git config --local --name-only --get-regexp http\.https\:\/\/github\.com\/\.extraheader
«ts:gha» http.https://github.com/.extraheader
«ts:gha» [command]/usr/bin/git config --local --unset-all http.https://github.com/.extraheader
«ts:gha» Cleaning up orphan processes
`)
		}},

		{"positive/logs/celery-worker.log", func(x *expander) string {
			noise := []string{
				"[«ts:py»: INFO/MainProcess] Task notifications.tasks.send_order_email[«uuid»] received",
				"[«ts:py»: INFO/ForkPoolWorker-«num:1:8»] Task notifications.tasks.send_order_email[«uuid»] succeeded in «num:0:2».«num:100:999»s: None",
				"[«ts:py»: INFO/MainProcess] Task reports.tasks.build_daily_sales[«uuid»] received",
				"[«ts:py»: INFO/ForkPoolWorker-«num:1:8»] Task reports.tasks.build_daily_sales[«uuid»] succeeded in «num:4:90».«num:100:999»s: {'rows': «num:100:9000», 'skipped': 0}",
				"[«ts:py»: WARNING/ForkPoolWorker-«num:1:8»] notifications.tasks: customer cus_«alnum:14» has no verified phone number, skipping SMS",
				"[«ts:py»: INFO/ForkPoolWorker-«num:1:8»] httpx: HTTP Request: POST https://api.mailchimp.com/3.0/lists/«hex:10»/members \"HTTP/1.1 200 OK\"",
				"[«ts:py»: INFO/Beat] Scheduler: Sending due task refresh-exchange-rates (rates.tasks.refresh)",
				"[«ts:py»: INFO/ForkPoolWorker-«num:1:8»] rates.tasks: updated «num:30:40» exchange rates from ECB feed dated «ts:date»",
				"[«ts:py»: INFO/MainProcess] Events of group {task} enabled by remote.",
			}
			return x.expand(`
 -------------- celery@notifications-worker-6c5d8b7f9-«lower:5» v5.4.0 (opalescent)
--- ***** -----
-- ******* ---- Linux-6.1.0-28-cloud-amd64-x86_64-with-glibc2.36 «ts:py»
- *** --- * ---
- ** ---------- [config]
- ** ---------- .> app:         northwind:0x7f«hex:9»
- ** ---------- .> transport:   amqp://celery:**@rabbitmq.internal:5672/notifications
- ** ---------- .> results:     redis://:**@redis-cache.internal:6379/1
- *** --- * --- .> concurrency: 8 (prefork)
-- ******* ---- .> task events: ON
--- ***** -----
 -------------- [queues]
                .> notifications    exchange=notifications(direct) key=notifications
                .> reports          exchange=reports(direct) key=reports

[tasks]
  . notifications.tasks.send_order_email
  . notifications.tasks.send_sms
  . notifications.tasks.post_alert
  . rates.tasks.refresh
  . reports.tasks.build_daily_sales

[«ts:py»: INFO/MainProcess] Connected to amqp://celery:**@rabbitmq.internal:5672/notifications
[«ts:py»: INFO/MainProcess] mingle: searching for neighbors
[«ts:py»: INFO/MainProcess] mingle: all alone
[«ts:py»: INFO/MainProcess] celery@notifications-worker-6c5d8b7f9-«lower:5» ready.
`) + x.lines(18, noise...) + x.expand(`[«ts:py»: WARNING/MainProcess] notifications.config: primary broker unreachable, falling back to amqp://celery:«amqp-password»@rabbitmq-2.internal:5672/notifications
[«ts:py»: INFO/ForkPoolWorker-4] reports.tasks: pulling order volume from https://exporter:«url-password»@prometheus.northwind.internal/api/v1/query_range?query=sum(rate(orders_created_total[5m]))&step=300
[«ts:py»: INFO/ForkPoolWorker-3] notifications.sms: using twilio account AC«hex:32» auth_token=«twilio-auth-token» from=+4420«digits:8»
`) + x.lines(16, noise...) + x.expand(`[«ts:py»: INFO/ForkPoolWorker-5] httpx: HTTP Request: POST https://api.telegram.org/bot«telegram-bot-token»/sendMessage "HTTP/1.1 200 OK"
[«ts:py»: INFO/ForkPoolWorker-5] notifications.tasks: alert «uuid» delivered to telegram chat -100«digits:10»
`) + x.lines(16, noise...) + x.expand(`[«ts:py»: INFO/ForkPoolWorker-2] marketing.sync: mailchimp client configured api_key=«mailchimp-api-key» list=«hex:10»
[«ts:py»: ERROR/ForkPoolWorker-6] notifications.tasks: discord alert failed: 429 Too Many Requests for url 'https://discord.com/api/webhooks/«discord-webhook-url»'
Traceback (most recent call last):
  File "/app/notifications/tasks.py", line 141, in post_alert
    resp.raise_for_status()
  File "/usr/local/lib/python3.12/site-packages/httpx/_models.py", line 829, in raise_for_status
    raise HTTPStatusError(message, request=request, response=self)
httpx.HTTPStatusError: Client error '429 Too Many Requests' for url 'https://discord.com/api/webhooks/«discord-webhook-url»'
For more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/429
[«ts:py»: INFO/ForkPoolWorker-6] Task notifications.tasks.post_alert[«uuid»] retry: Retry in 30s: HTTPStatusError('429 Too Many Requests')
`) + x.lines(14, noise...)
		}},

		{"positive/logs/edge-proxy-access.log", func(x *expander) string {
			ua := "«pick:Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML\\, like Gecko) Chrome/131.0.0.0 Safari/537.36,Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0,python-requests/2.32.3,Go-http-client/2.0,curl/8.5.0,okhttp/4.12.0»"
			noise := []string{
				`«pubip» - - [«ts:clf»] "GET /v1/products?category=«pick:kitchen,garden,office,outdoor»&page=«num:1:12»&sort=«pick:price_asc,newest,popular» HTTP/1.1" 200 «num:800:40000» "https://shop.northwind.io/«pick:kitchen,garden,office»" "` + ua + `" rt=0.0«num:10:99» uct=0.000 urt=0.0«num:10:99» rid=«hex:32»`,
				`«pubip» - - [«ts:clf»] "GET /static/js/main.«hex:8#mainjs».js HTTP/2.0" 200 «num:40000:300000» "https://shop.northwind.io/" "` + ua + `" rt=0.00«num:1:9» uct=- urt=- rid=«hex:32»`,
				`«pubip» - - [«ts:clf»] "POST /v1/cart/items HTTP/1.1" 201 «num:200:900» "https://shop.northwind.io/p/NW-«upper:4»-«num:100:999»" "` + ua + `" rt=0.0«num:10:99» uct=0.000 urt=0.0«num:10:99» rid=«hex:32»`,
				`«pubip» - - [«ts:clf»] "GET /healthz HTTP/1.1" 200 2 "-" "kube-probe/1.31" rt=0.000 uct=0.000 urt=0.001 rid=«hex:32»`,
				`«pubip» - - [«ts:clf»] "GET /v1/orders/«num:100000:999999»/tracking?carrier=«pick:dhl,ups,postnl» HTTP/1.1" 200 «num:300:3000» "-" "` + ua + `" rt=0.«num:100:999» uct=0.001 urt=0.«num:100:999» rid=«hex:32»`,
				`«pubip» - - [«ts:clf»] "GET /images/products/«hex:16»_«pick:400,800,1200»w.webp HTTP/2.0" 200 «num:9000:90000» "https://shop.northwind.io/" "` + ua + `" rt=0.00«num:1:9» uct=- urt=- rid=«hex:32»`,
				`«pubip» - - [«ts:clf»] "GET /search?q=«pick:standing+desk,garden+hose,espresso+cups,keyboard+tray»&utm_source=newsletter&utm_medium=email&utm_campaign=«pick:spring-sale,restock,weekly» HTTP/1.1" 200 «num:4000:60000» "-" "` + ua + `" rt=0.«num:100:999» uct=0.000 urt=0.«num:100:999» rid=«hex:32»`,
				`«pubip» - - [«ts:clf»] "GET /account/reset-password?sent=1 HTTP/1.1" 200 «num:3000:9000» "https://shop.northwind.io/account/login" "` + ua + `" rt=0.0«num:10:99» uct=0.000 urt=0.0«num:10:99» rid=«hex:32»`,
			}
			return x.lines(30, noise...) +
				x.expand(`«pubip» - - [«ts:clf»] "GET /geo/maps/api/geocode/json?address=Prinsengracht+263%2C+Amsterdam&key=«gcp-api-key»&language=nl HTTP/1.1" 200 «num:1000:3000» "-" "python-requests/2.32.3" rt=0.1«num:10:99» uct=0.002 urt=0.1«num:10:99» rid=«hex:32»
`) + x.lines(30, noise...) +
				x.expand(`«pubip» - - [«ts:clf»] "GET /gitlab/api/v4/projects/118/pipelines?ref=main&private_token=«gitlab-pat»&per_page=5 HTTP/1.1" 200 «num:1000:6000» "-" "curl/8.5.0" rt=0.2«num:10:99» uct=0.001 urt=0.2«num:10:99» rid=«hex:32»
`) + x.lines(30, noise...) +
				x.expand(`«pubip» - - [«ts:clf»] "POST /login/oauth/access_token?client_id=Iv1.«hex:16»&client_secret=«github-oauth-client-secret»&code=«hex:20» HTTP/1.1" 200 «num:100:300» "-" "Go-http-client/2.0" rt=0.3«num:10:99» uct=0.001 urt=0.3«num:10:99» rid=«hex:32»
`) + x.lines(25, noise...) +
				x.expand(`«pubip» - - [«ts:clf»] "GET /user/repos?access_token=«github-oauth»&per_page=100 HTTP/1.1" 401 «num:100:300» "-" "legacy-sync/0.9" rt=0.0«num:10:99» uct=0.001 urt=0.0«num:10:99» rid=«hex:32»
`) + x.lines(25, noise...) +
				x.expand(`«pubip» - - [«ts:clf»] "GET /v1/exports/orders.csv?from=«ts:date»&api_key=«generic-api-key» HTTP/1.1" 200 «num:40000:900000» "-" "Microsoft Office Excel 2014" rt=1.«num:100:999» uct=0.000 urt=1.«num:100:999» rid=«hex:32»
`) + x.lines(20, noise...)
		}},
	}
}

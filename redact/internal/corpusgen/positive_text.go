package main

// envFiles are .env files and environment dumps.
func envFiles() []positiveFile {
	return []positiveFile{
		{"positive/env/storefront-production.env", tmpl(`# -----------------------------------------------------------------------------
# northwind storefront — production
# Managed by ops. Values here override config/defaults.env at boot.
# Last synced from the password manager on «ts:date».
# -----------------------------------------------------------------------------
APP_ENV=production
APP_URL=https://shop.northwind.io
PORT=8080
LOG_LEVEL=info
LOG_FORMAT=json
TRUST_PROXY=true
TZ=Europe/Amsterdam

# --- database / cache ---
DB_HOST=storefront-db.internal
DB_USER=storefront
DB_PASSWORD=«generic-password»
DATABASE_URL=mysql://storefront:«mysql-password»@storefront-db.internal:3306/storefront?ssl-mode=REQUIRED&connection_limit=20
DATABASE_POOL_TIMEOUT=10
REDIS_URL=redis://default:«redis-password»@redis-prod.internal:6379/0
CACHE_TTL_SECONDS=300

# --- sessions ---
SESSION_COOKIE_NAME=nw_session
SESSION_SECRET=«generic-secret»
SESSION_MAX_AGE_DAYS=30
PASSWORD_RESET_TOKEN_TTL_MINUTES=30

# --- aws ---
AWS_REGION=eu-west-1
AWS_ACCESS_KEY_ID=«aws-access-key-id»
AWS_SECRET_ACCESS_KEY=«aws-secret-access-key»
S3_BUCKET=northwind-storefront-assets
CLOUDFRONT_DISTRIBUTION_ID=E«upper:13»

# --- payments ---
STRIPE_PUBLISHABLE_KEY=pk_live_51«alnum:97»
STRIPE_SECRET_KEY=«stripe-secret-key»
STRIPE_API_VERSION=2024-06-20
CHECKOUT_CURRENCY=eur

# --- messaging ---
SENDGRID_API_KEY=«sendgrid-api-key»
EMAIL_FROM="Northwind <orders@northwind.io>"
EMAIL_REPLY_TO=support@northwind.io
TWILIO_ACCOUNT_SID=AC«hex:32»
TWILIO_API_KEY=«twilio-api-key»
TWILIO_API_SECRET=«twilio-api-secret»
TWILIO_AUTH_TOKEN=«twilio-auth-token»
TWILIO_FROM_NUMBER=+4420«digits:8»
MAILCHIMP_API_KEY=«mailchimp-api-key»
MAILCHIMP_AUDIENCE_ID=«hex:10»

# --- observability ---
SENTRY_DSN=https://«hex:32»@o«num:100000:999999».ingest.de.sentry.io/«num:1000000:9999999»
SENTRY_ENVIRONMENT=production
SENTRY_TRACES_SAMPLE_RATE=0.05
SENTRY_AUTH_TOKEN=«sentry-user-token»

# --- integrations ---
SHOPIFY_STORE_DOMAIN=northwind-store.myshopify.com
SHOPIFY_ADMIN_TOKEN=«shopify-access-token»
SHOPIFY_API_VERSION=2024-10
SEARCH_API_KEY=«generic-api-key»
SEARCH_INDEX=products_v4
FEATURE_FLAGS=checkout_v2,gift_cards,apple_pay
MAX_CART_ITEMS=50
`)},

		{"positive/env/analytics-worker-printenv.env", tmpl(`KUBERNETES_SERVICE_PORT_HTTPS=443
ANALYTICS_API_PORT_8080_TCP_PORT=8080
KUBERNETES_SERVICE_PORT=443
HOSTNAME=analytics-worker-6c5d8b7f9-«lower:5»
ANALYTICS_API_SERVICE_PORT_HTTP=8080
ANALYTICS_API_PORT=tcp://10.«num:96:111».«num:0:255».«num:2:250»:8080
PYTHON_VERSION=3.12.7
PYTHON_SHA256=«hex:64»
DD_API_KEY=«datadog-api-key»
DD_APP_KEY=«datadog-app-key»
DD_SITE=datadoghq.eu
DD_ENV=production
DD_SERVICE=analytics-worker
DD_VERSION=4.2.0
DD_LOGS_INJECTION=true
NEW_RELIC_API_KEY=«newrelic-user-api-key»
NEW_RELIC_ACCOUNT_ID=«num:1000000:9999999»
GITHUB_TOKEN=«github-fine-grained-pat»
PWD=/app
HOME=/home/app
LANG=C.UTF-8
DOPPLER_TOKEN=«doppler-token»
DOPPLER_PROJECT=analytics
DOPPLER_CONFIG=prd
DATABRICKS_HOST=https://adb-«digits:16».«num:1:19».azuredatabricks.net
DATABRICKS_TOKEN=«databricks-token»
DATABRICKS_WAREHOUSE_ID=«hex:16»
HF_HOME=/cache/huggingface
HF_TOKEN=«huggingface-token»
TRANSFORMERS_OFFLINE=0
VAULT_ADDR=https://vault.internal:8200
VAULT_TOKEN=«vault-token»
VAULT_NAMESPACE=analytics
GRAFANA_URL=https://grafana.northwind.io
GRAFANA_TOKEN=«grafana-service-account-token»
PULUMI_ACCESS_TOKEN=«pulumi-access-token»
PULUMI_BACKEND_URL=https://api.pulumi.com
AZURE_TENANT_ID=«uuid»
AZURE_CLIENT_ID=«uuid»
AZURE_CLIENT_SECRET=«azure-ad-client-secret»
AZURE_STORAGE_ACCOUNT=nwanalyticsprod
SHLVL=1
KUBERNETES_PORT_443_TCP_PROTO=tcp
ANALYTICS_API_PORT_8080_TCP_ADDR=10.«num:96:111».«num:0:255».«num:2:250»
KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1
ANALYTICS_API_SERVICE_HOST=10.«num:96:111».«num:0:255».«num:2:250»
KUBERNETES_SERVICE_HOST=10.96.0.1
KUBERNETES_PORT=tcp://10.96.0.1:443
KUBERNETES_PORT_443_TCP_PORT=443
PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin
ANALYTICS_API_PORT_8080_TCP_PROTO=tcp
CELERY_CONCURRENCY=4
PIP_NO_CACHE_DIR=1
GPG_KEY=7169605F62C751356D054A26A821E680E5FA6305
_=/usr/bin/printenv
`)},

		{"positive/env/local-dev.env", tmpl(`# Local development settings.
# Copy to .env.local; never commit real values. Ask in #dev-env for access.

NODE_ENV=development
NEXT_PUBLIC_APP_URL=http://localhost:3000

# Supabase (dev project)
SUPABASE_URL=https://«lower:20».supabase.co
SUPABASE_SERVICE_ROLE_KEY=«jwt-hs256»

# LLM features
OPENAI_API_KEY=«openai-legacy-api-key»
OPENAI_MODEL=gpt-4o-mini
MAX_OUTPUT_TOKENS=1024

# Project management / tooling
LINEAR_API_KEY=«linear-api-key»
LINEAR_TEAM_ID=«uuid»
POSTMAN_API_KEY=«postman-api-key»

# Bots
SLACK_BOT_TOKEN=«slack-bot-token»
SLACK_SIGNING_SECRET_FILE=/run/secrets/slack_signing
DISCORD_BOT_TOKEN=«discord-bot-token»
DISCORD_GUILD_ID=1«digits:18»
DISCORD_WEBHOOK_URL=https://discord.com/api/webhooks/«discord-webhook-url»

# Auth: ES256 signing key for session JWTs
JWT_PRIVATE_KEY="«ec-private-key|json»"
JWT_ISSUER=http://localhost:3000
JWT_TTL=15m

# sops-encrypted files under deploy/ are decrypted with this
SOPS_AGE_KEY=«age-secret-key»

MONGODB_URI=mongodb+srv://app:«mongodb-password»@cluster0.«lower:5».mongodb.net/?retryWrites=true&w=majority&appName=Cluster0
DJANGO_SECRET_KEY='«django-insecure-key»'
`)},
	}
}

// traceFiles are crash reports and stack traces that print configuration.
func traceFiles() []positiveFile {
	return []positiveFile{
		{"positive/traces/django-technical-500.txt", tmpl(`HTTPError at /api/invoices/sync/
HTTP Error 401: Unauthorized

Request Method:	POST
Request URL:	https://app.northwind.io/api/invoices/sync/
Django Version:	5.1.4
Exception Type:	HTTPError
Exception Value:	HTTP Error 401: Unauthorized
Exception Location:	/usr/local/lib/python3.12/urllib/request.py, line 639, in http_error_default
Raised during:	billing.views.sync_invoices
Python Executable:	/usr/local/bin/python
Python Version:	3.12.7
Python Path:	['/app', '/usr/local/lib/python312.zip', '/usr/local/lib/python3.12', '/usr/local/lib/python3.12/lib-dynload', '/usr/local/lib/python3.12/site-packages']
Server time:	«ts:py»

Traceback Switch to copy-and-paste view

/usr/local/lib/python3.12/site-packages/django/core/handlers/exception.py, line 55, in inner
                response = get_response(request)
     Local vars
Variable	Value
exc	HTTPError()
get_response	<bound method BaseHandler._get_response of <django.core.handlers.wsgi.WSGIHandler object at 0x7f«hex:9»>>
request	<WSGIRequest: POST '/api/invoices/sync/'>

/app/billing/views.py, line 88, in sync_invoices
            sg = SendGridAPIClient(api_key)
            response = sg.send(build_invoice_message(invoice))
     Local vars
Variable	Value
api_key	'«sendgrid-api-key»'
invoice	<Invoice: INV-2025-«num:1000:9999» (open)>
request	<WSGIRequest: POST '/api/invoices/sync/'>
sg	<sendgrid.sendgrid.SendGridAPIClient object at 0x7f«hex:9»>

/usr/local/lib/python3.12/site-packages/python_http_client/client.py, line 204, in _make_request
                raise exc
     Local vars
Variable	Value
exc	HTTPError()
opener	<urllib.request.OpenerDirector object at 0x7f«hex:9»>
timeout	None

Request information
USER
maria.lopez

GET
No GET data

POST
Variable	Value
invoice_id	'«num:10000:99999»'
csrfmiddlewaretoken	'********************'

FILES
No FILES data

COOKIES
Variable	Value
csrftoken	'********************'
sessionid	'********************'

META
Variable	Value
CONTENT_LENGTH	'«num:40:90»'
CONTENT_TYPE	'application/x-www-form-urlencoded'
HTTP_ACCEPT	'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8'
HTTP_AUTHORIZATION	'********************'
HTTP_COOKIE	'********************'
HTTP_HOST	'app.northwind.io'
HTTP_USER_AGENT	'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15'
HTTP_X_FORWARDED_FOR	'«pubip»'
HTTP_X_REQUEST_ID	'«uuid»'
REMOTE_ADDR	'«ip»'
REQUEST_METHOD	'POST'
SERVER_NAME	'0.0.0.0'
SERVER_PORT	'8000'
wsgi.url_scheme	'https'

Settings
Using settings module northwind.settings.production
Setting	Value
ABSOLUTE_URL_OVERRIDES	{}
ADMINS	[('Ops', 'ops@northwind.io')]
ALLOWED_HOSTS	['app.northwind.io', '.northwind.internal']
AUTH_PASSWORD_VALIDATORS	'********************'
AUTH_USER_MODEL	'accounts.User'
CACHES	{'default': {'BACKEND': 'django.core.cache.backends.redis.RedisCache', 'LOCATION': 'redis://:«redis-password»@cache.northwind.internal:6379/2', 'TIMEOUT': 300}}
CELERY_BROKER_URL	'amqp://billing:«amqp-password»@rabbitmq.northwind.internal:5672/billing'
CELERY_RESULT_BACKEND	'django-db'
CSRF_COOKIE_SECURE	True
DATABASES	{'default': {'ATOMIC_REQUESTS': False, 'AUTOCOMMIT': True, 'CONN_HEALTH_CHECKS': False, 'CONN_MAX_AGE': 60, 'ENGINE': 'django.db.backends.postgresql', 'HOST': 'billing-db.northwind.internal', 'NAME': 'billing', 'OPTIONS': {}, 'PASSWORD': '********************', 'PORT': '5432', 'TEST': {'CHARSET': None, 'COLLATION': None, 'MIGRATE': True, 'MIRROR': None, 'NAME': None}, 'TIME_ZONE': None, 'USER': 'billing'}}
DEBUG	True
DEFAULT_FROM_EMAIL	'billing@northwind.io'
EMAIL_BACKEND	'django.core.mail.backends.smtp.EmailBackend'
EMAIL_HOST	'smtp.sendgrid.net'
EMAIL_HOST_PASSWORD	'********************'
EMAIL_HOST_USER	'apikey'
EMAIL_PORT	587
INSTALLED_APPS	['django.contrib.admin', 'django.contrib.auth', 'django.contrib.contenttypes', 'django.contrib.sessions', 'django.contrib.messages', 'django.contrib.staticfiles', 'rest_framework', 'django_celery_results', 'accounts', 'billing']
LANGUAGE_CODE	'en-us'
MONGO_REPORTING_URI	'mongodb://reporting:«mongodb-password»@mongo-0.mongo.reporting.svc:27017,mongo-1.mongo.reporting.svc:27017/reporting?replicaSet=rs0&authSource=admin'
SECRET_KEY	'********************'
SECURE_PROXY_SSL_HEADER	('HTTP_X_FORWARDED_PROTO', 'https')
SESSION_COOKIE_SECURE	True
STRIPE_SECRET_KEY	'********************'
TIME_ZONE	'Europe/Amsterdam'
USE_TZ	True

You're seeing this error because you have DEBUG = True in your Django settings file. Change that to False, and Django will display a standard page generated by the handler for this status code.
`)},

		{"positive/traces/spring-boot-startup.txt", tmpl(`+ exec java -XX:MaxRAMPercentage=75 -Dspring.profiles.active=prod -Dspring.cloud.azure.active-directory.credential.client-secret=«azure-ad-client-secret» -Dspring.cloud.azure.storage.blob.connection-string=DefaultEndpointsProtocol=https;AccountName=nwinventory;AccountKey=«azure-storage-account-key»;EndpointSuffix=core.windows.net -jar /app/app.jar

  .   ____          _            __ _ _
 /\\ / ___'_ __ _ _(_)_ __  __ _ \ \ \ \
( ( )\___ | '_ | '_| | '_ \/ _' | \ \ \ \
 \\/  ___)| |_)| | | | | || (_| |  ) ) ) )
  '  |____| .__|_| |_|_| |_\__, | / / / /
 =========|_|==============|___/=/_/_/_/

 :: Spring Boot ::                (v3.4.1)

«ts:iso»  INFO 1 --- [inventory-service] [           main] c.n.inventory.InventoryApplication       : Starting InventoryApplication v1.8.0 using Java 21.0.5 with PID 1 (/app/app.jar started by spring in /app)
«ts:iso»  INFO 1 --- [inventory-service] [           main] c.n.inventory.InventoryApplication       : The following 1 profile is active: "prod"
«ts:iso»  INFO 1 --- [inventory-service] [           main] .s.d.r.c.RepositoryConfigurationDelegate : Bootstrapping Spring Data JPA repositories in DEFAULT mode.
«ts:iso»  INFO 1 --- [inventory-service] [           main] .s.d.r.c.RepositoryConfigurationDelegate : Finished Spring Data repository scanning in «num:40:200» ms. Found 7 JPA repository interfaces.
«ts:iso»  INFO 1 --- [inventory-service] [           main] o.s.b.w.embedded.tomcat.TomcatWebServer  : Tomcat initialized with port 8080 (http)
«ts:iso»  INFO 1 --- [inventory-service] [           main] o.apache.catalina.core.StandardService   : Starting service [Tomcat]
«ts:iso»  INFO 1 --- [inventory-service] [           main] o.apache.catalina.core.StandardEngine    : Starting Servlet engine: [Apache Tomcat/10.1.34]
«ts:iso»  INFO 1 --- [inventory-service] [           main] o.a.c.c.C.[Tomcat].[localhost].[/]       : Initializing Spring embedded WebApplicationContext
«ts:iso»  INFO 1 --- [inventory-service] [           main] w.s.c.ServletWebServerApplicationContext : Root WebApplicationContext: initialization completed in «num:800:2000» ms
«ts:iso»  INFO 1 --- [inventory-service] [           main] com.zaxxer.hikari.HikariDataSource       : inventory-pool - Starting...
«ts:iso»  WARN 1 --- [inventory-service] [           main] ConfigServletWebServerApplicationContext : Exception encountered during context initialization - cancelling refresh attempt: org.springframework.boot.context.properties.ConfigurationPropertiesBindException: Error creating bean with name 'spring.rabbitmq-org.springframework.boot.autoconfigure.amqp.RabbitProperties': Could not bind properties to 'RabbitProperties' : prefix=spring.rabbitmq, ignoreInvalidFields=false, ignoreUnknownFields=true
«ts:iso»  INFO 1 --- [inventory-service] [           main] o.apache.catalina.core.StandardService   : Stopping service [Tomcat]
«ts:iso»  INFO 1 --- [inventory-service] [           main] .s.b.a.l.ConditionEvaluationReportLogger :

Error starting ApplicationContext. To display the condition evaluation report re-run your application with 'debug' enabled.
«ts:iso» ERROR 1 --- [inventory-service] [           main] o.s.b.d.LoggingFailureAnalysisReporter   :

***************************
APPLICATION FAILED TO START
***************************

Description:

Failed to bind properties under 'spring.rabbitmq.addresses' to java.lang.String:

    Property: spring.rabbitmq.addresses
    Value: "amqps://inventory:«amqp-password#mq»@b-«uuid».mq.eu-west-1.amazonaws.com:5671;amqps://inventory:«amqp-password#mq»@b-«uuid»-2.mq.eu-west-1.amazonaws.com:5671"
    Origin: System Environment Property "SPRING_RABBITMQ_ADDRESSES"
    Reason: java.lang.IllegalArgumentException: Multiple addresses must be separated by a comma

Failed to bind properties under 'spring.datasource.url' to java.lang.String:

    Property: spring.datasource.url
    Value: "jdbc:mysql://inventory:«mysql-password»@inventory-db.internal:3306/inventory?useSSL=true&serverTimezone=UTC"
    Origin: class path resource [application-prod.yaml] - 7:10
    Reason: java.lang.IllegalStateException: Cannot combine user info with the 'username' property

Action:

Update your application's configuration

«ts:iso»  WARN 1 --- [inventory-service] [           main] o.s.b.SpringApplication                  : Unable to close ApplicationContext
java.lang.IllegalStateException: Failed to introspect Class [com.northwind.inventory.config.MessagingConfig] from ClassLoader [jdk.internal.loader.ClassLoaders$AppClassLoader@«hex:8»]
	at org.springframework.util.ReflectionUtils.getDeclaredMethods(ReflectionUtils.java:483) ~[spring-core-6.2.1.jar!/:6.2.1]
	at org.springframework.util.ReflectionUtils.doWithMethods(ReflectionUtils.java:360) ~[spring-core-6.2.1.jar!/:6.2.1]
	at org.springframework.beans.factory.support.AbstractAutowireCapableBeanFactory.getTypeForFactoryMethod(AbstractAutowireCapableBeanFactory.java:745) ~[spring-beans-6.2.1.jar!/:6.2.1]
	at org.springframework.beans.factory.support.AbstractBeanFactory.isTypeMatch(AbstractBeanFactory.java:627) ~[spring-beans-6.2.1.jar!/:6.2.1]
	at org.springframework.context.support.AbstractApplicationContext.close(AbstractApplicationContext.java:1115) ~[spring-context-6.2.1.jar!/:6.2.1]
	at org.springframework.boot.SpringApplication.run(SpringApplication.java:357) ~[spring-boot-3.4.1.jar!/:3.4.1]
	at com.northwind.inventory.InventoryApplication.main(InventoryApplication.java:12) ~[!/:1.8.0]
	at java.base/jdk.internal.reflect.DirectMethodHandleAccessor.invoke(DirectMethodHandleAccessor.java:103) ~[na:na]
	at java.base/java.lang.reflect.Method.invoke(Method.java:580) ~[na:na]
	at org.springframework.boot.loader.launch.Main.main(Main.java:58) ~[app.jar:1.8.0]
Caused by: java.lang.NoClassDefFoundError: com/azure/messaging/servicebus/ServiceBusClientBuilder
	at java.base/java.lang.Class.getDeclaredMethods0(Native Method) ~[na:na]
	at java.base/java.lang.Class.privateGetDeclaredMethods(Class.java:3578) ~[na:na]
	at java.base/java.lang.Class.getDeclaredMethods(Class.java:2676) ~[na:na]
	... 21 common frames omitted
`)},

		{"positive/traces/node-axios-error.txt", tmpl(`[droplet-sync] «ts:iso» job failed
AxiosError: Request failed with status code 403
    at settle (/app/node_modules/axios/dist/node/axios.cjs:2019:12)
    at IncomingMessage.handleStreamEnd (/app/node_modules/axios/dist/node/axios.cjs:3135:11)
    at IncomingMessage.emit (node:events:531:35)
    at endReadableNT (node:internal/streams/readable:1698:12)
    at process.processTicksAndRejections (node:internal/process/task_queues:90:21)
    at Axios.request (/app/node_modules/axios/dist/node/axios.cjs:4287:41)
    at async DropletSync.run (/app/dist/jobs/droplet-sync.js:41:22)
    at async Scheduler.tick (/app/dist/scheduler.js:88:9) {
  code: 'ERR_BAD_REQUEST',
  config: {
    transitional: {
      silentJSONParsing: true,
      forcedJSONParsing: true,
      clarifyTimeoutError: false
    },
    adapter: [ 'xhr', 'http', 'fetch' ],
    transformRequest: [ [Function: transformRequest] ],
    transformResponse: [ [Function: transformResponse] ],
    timeout: 10000,
    xsrfCookieName: 'XSRF-TOKEN',
    xsrfHeaderName: 'X-XSRF-TOKEN',
    maxContentLength: -1,
    maxBodyLength: -1,
    env: { FormData: [Function [FormData]], Blob: [class Blob] },
    validateStatus: [Function: validateStatus],
    headers: Object [AxiosHeaders] {
      Accept: 'application/json, text/plain, */*',
      'Content-Type': undefined,
      Authorization: 'Bearer «digitalocean-pat#do»',
      'User-Agent': 'axios/1.7.9',
      'Accept-Encoding': 'gzip, compress, deflate, br'
    },
    baseURL: 'https://api.digitalocean.com/v2',
    method: 'get',
    url: '/droplets?tag_name=k8s-worker&per_page=200',
    allowAbsoluteUrls: true,
    data: undefined
  },
  request: <ref *1> ClientRequest {
    _events: [Object: null prototype] {
      abort: [Function (anonymous)],
      aborted: [Function (anonymous)],
      connect: [Function (anonymous)],
      error: [Function (anonymous)],
      socket: [Function (anonymous)],
      timeout: [Function (anonymous)],
      finish: [Function: requestOnFinish]
    },
    _eventsCount: 7,
    _maxListeners: undefined,
    outputData: [],
    outputSize: 0,
    writable: true,
    destroyed: true,
    _last: true,
    chunkedEncoding: false,
    shouldKeepAlive: true,
    maxRequestsOnConnectionReached: false,
    _defaultKeepAlive: true,
    useChunkedEncodingByDefault: false,
    sendDate: false,
    _removedConnection: false,
    _removedContLen: false,
    _removedTE: false,
    strictContentLength: false,
    _contentLength: 0,
    _hasBody: true,
    _trailer: '',
    finished: true,
    _headerSent: true,
    _closed: true,
    _header: 'GET /v2/droplets?tag_name=k8s-worker&per_page=200 HTTP/1.1\r\n' +
      'Accept: application/json, text/plain, */*\r\n' +
      'Authorization: Bearer «digitalocean-pat#do»\r\n' +
      'User-Agent: axios/1.7.9\r\n' +
      'Accept-Encoding: gzip, compress, deflate, br\r\n' +
      'Host: api.digitalocean.com\r\n' +
      'Connection: keep-alive\r\n' +
      '\r\n',
    _keepAliveTimeout: 0,
    _onPendingData: [Function: nop],
    agent: Agent {
      _events: [Object: null prototype],
      _eventsCount: 2,
      _maxListeners: undefined,
      defaultPort: 443,
      protocol: 'https:',
      options: [Object: null prototype],
      requests: [Object: null prototype] {},
      sockets: [Object: null prototype] {},
      freeSockets: [Object: null prototype],
      keepAliveMsecs: 1000,
      keepAlive: true,
      maxSockets: Infinity,
      maxFreeSockets: 256,
      scheduling: 'lifo',
      maxTotalSockets: Infinity,
      totalSocketCount: 1,
      maxCachedSessions: 100,
      _sessionCache: [Object],
      [Symbol(shapeMode)]: false,
      [Symbol(kCapture)]: false
    },
    method: 'GET',
    path: '/v2/droplets?tag_name=k8s-worker&per_page=200',
    host: 'api.digitalocean.com',
    protocol: 'https:',
    [Symbol(shapeMode)]: false,
    [Symbol(kCapture)]: false,
    [Symbol(kBytesWritten)]: 0,
    [Symbol(kNeedDrain)]: false,
    [Symbol(corked)]: 0,
    [Symbol(kOutHeaders)]: [Object: null prototype] {
      accept: [Array],
      authorization: [Array],
      'user-agent': [Array],
      'accept-encoding': [Array],
      host: [Array]
    },
    [Symbol(errored)]: null,
    [Symbol(kHighWaterMark)]: 16384,
    [Symbol(kRejectNonStandardBodyWrites)]: false,
    [Symbol(kUniqueHeaders)]: null
  },
  response: {
    status: 403,
    statusText: 'Forbidden',
    data: {
      id: 'Forbidden',
      message: 'You do not have access for the attempted action.',
      request_id: '«uuid»'
    }
  },
  status: 403
}
[droplet-sync] «ts:iso» retrying in 60s (attempt 2/5)
[issue-bot] «ts:iso» GraphQL request failed
Error: Authentication required, not authenticated
    at LinearGraphQLClient.rawRequest (/app/node_modules/@linear/sdk/dist/index-cjs.min.js:1:«num:10000:99999»)
    at async IssueBot.report (/app/dist/bots/issue-bot.js:57:17) {
  type: 'AuthenticationError',
  errors: [ { message: 'Authentication required, not authenticated', extensions: [Object] } ],
  query: 'mutation IssueCreate($input: IssueCreateInput!) { issueCreate(input: $input) { success issue { id identifier } } }',
  variables: { input: { teamId: '«uuid»', title: 'droplet-sync failing with 403' } },
  status: 400,
  request: {
    url: 'https://api.linear.app/graphql',
    headers: { 'content-type': 'application/json', authorization: '«linear-api-key»', 'user-agent': '@linear/sdk@35.0.0' }
  }
}
[collections] «ts:iso» postman sync: GET https://api.getpostman.com/collections?apikey=«postman-api-key» -> 401 {"error":{"name":"AuthenticationError","message":"Invalid API Key. Every request requires a valid API Key to be sent."}}
`)},

		{"positive/traces/go-panic.txt", tmpl(`«ts:go» ledger starting version=v1.21.0 commit=«hex:12»
«ts:go» loaded config: config.Config{Listen:":8443", DatabaseURL:"postgres://ledger:«postgres-password»@ledger-db:5432/ledger?sslmode=disable", RedisURL:"redis://ledger:«redis-password»@redis:6379/2", StripeKey:"«stripe-secret-key»", GitHubToken:"«github-fine-grained-pat»", SlackWebhook:"https://hooks.slack.com/services/«slack-webhook-url»", PayoutCron:"0 */6 * * *", Timeout:30000000000, Debug:false}
«ts:go» migrations: schema at version 42, nothing to do
«ts:go» http: listening on :8443
panic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x28 pc=0x8f3a21]

goroutine 1 [running]:
github.com/northwind/ledger/internal/payout.(*Scheduler).Start(0x0, {0xb1c2e8, 0xc0000a2000})
	/src/internal/payout/scheduler.go:64 +0x41
main.run({0xb1c2e8, 0xc0000a2000}, 0xc00012e000)
	/src/cmd/ledger/main.go:118 +0x6d2
main.main()
	/src/cmd/ledger/main.go:41 +0x1c5

goroutine 18 [select]:
github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck(0xc0001d4000)
	/go/pkg/mod/github.com/jackc/pgx/v5@v5.7.2/pgxpool/pool.go:448 +0xd8
created by github.com/jackc/pgx/v5/pgxpool.NewWithConfig in goroutine 1
	/go/pkg/mod/github.com/jackc/pgx/v5@v5.7.2/pgxpool/pool.go:283 +0x6b6

goroutine 34 [IO wait]:
internal/poll.runtime_pollWait(0x7f«hex:8», 0x72)
	/usr/local/go/src/runtime/netpoll.go:351 +0x85
internal/poll.(*pollDesc).wait(0xc000210080?, 0xc000238000?, 0x0)
	/usr/local/go/src/internal/poll/fd_poll_runtime.go:84 +0x27
internal/poll.(*FD).Accept(0xc000210080)
	/usr/local/go/src/internal/poll/fd_unix.go:620 +0x295
net.(*netFD).accept(0xc000210080)
	/usr/local/go/src/net/fd_unix.go:172 +0x29
net.(*TCPListener).accept(0xc0001b2040)
	/usr/local/go/src/net/tcpsock_posix.go:159 +0x1e
net/http.(*Server).Serve(0xc0001f6000, {0xb1b5a0, 0xc0001b2040})
	/usr/local/go/src/net/http/server.go:3330 +0x30c
created by main.run in goroutine 1
	/src/cmd/ledger/main.go:102 +0x5b1

goroutine 35 [chan receive]:
github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper(0xc000226000, 0xdf8475800)
	/go/pkg/mod/github.com/redis/go-redis/v9@v9.7.0/internal/pool/pool.go:509 +0x9c
created by github.com/redis/go-redis/v9/internal/pool.NewConnPool in goroutine 1
	/go/pkg/mod/github.com/redis/go-redis/v9@v9.7.0/internal/pool/pool.go:110 +0x1d0
exit status 2
`)},

		{"positive/traces/python-embedding-job.txt", tmpl(`«ts:py» INFO embed_tickets: starting batch job run_id=«uuid»
«ts:py» DEBUG embed_tickets: settings=Settings(environment='production', database_url='postgresql+psycopg://etl:«postgres-password»@warehouse.internal:5432/analytics', cohere_api_key='«cohere-api-key»', openai_api_key=SecretStr('**********'), batch_size=96, embedding_model='embed-english-v3.0', dry_run=False)
«ts:py» INFO embed_tickets: loaded «num:2000:9000» tickets updated since «ts:date»
«ts:py» INFO embed_tickets: batch 1/«num:20:90» embedded in «num:1:9».«num:10:99»s
«ts:py» INFO embed_tickets: batch 2/«num:20:90» embedded in «num:1:9».«num:10:99»s
«ts:py» WARNING embed_tickets: 3 tickets exceed 512 tokens and were truncated: «num:100000:999999», «num:100000:999999», «num:100000:999999»
«ts:py» ERROR embed_tickets: batch 3 failed
Traceback (most recent call last):
  File "/app/pipelines/embed_tickets.py", line 84, in run_batch
    vectors = embed(batch)
              ^^^^^^^^^^^^
  File "/app/pipelines/embed_tickets.py", line 51, in embed
    model = load_reranker(token="«huggingface-token»")
            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/app/pipelines/models.py", line 22, in load_reranker
    return AutoModelForSequenceClassification.from_pretrained("northwind/ticket-reranker", token=token)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/site-packages/transformers/modeling_utils.py", line 3541, in from_pretrained
    resolved_config_file = cached_file(
                           ^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/site-packages/transformers/utils/hub.py", line 422, in cached_file
    raise EnvironmentError(
OSError: You are trying to access a gated repo.
Make sure to have access to it at https://huggingface.co/northwind/ticket-reranker.
401 Client Error. (Request ID: Root=1-«hex:8»-«hex:24»;«uuid»)

Cannot access gated repo for url https://huggingface.co/northwind/ticket-reranker/resolve/main/config.json.
Access to model northwind/ticket-reranker is restricted. You must have access to it and be authenticated to access it. Please log in.
«ts:py» INFO embed_tickets: falling back to hosted summaries
«ts:py» ERROR embed_tickets: summary fallback failed
Traceback (most recent call last):
  File "/app/pipelines/summarize.py", line 19, in summarize
    client = OpenAI(api_key="«perplexity-api-key»", base_url="https://api.perplexity.ai")
  File "/app/pipelines/summarize.py", line 27, in summarize
    resp = client.chat.completions.create(model="sonar", messages=messages, max_tokens=256)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/site-packages/openai/_utils/_utils.py", line 279, in wrapper
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.12/site-packages/openai/_base_client.py", line 1046, in _request
    raise self._make_status_error_from_response(err.response) from None
openai.RateLimitError: Error code: 429 - {'error': {'message': 'Rate limit exceeded', 'type': 'rate_limit_error', 'code': 429}}
«ts:py» INFO embed_tickets: wrote «num:100:900» vectors, «num:10:90» failed; next run in 6h
`)},
	}
}

// shellFiles are shell scripts and shell history.
func shellFiles() []positiveFile {
	return []positiveFile{
		{"positive/shell/api-smoke-test.sh", tmpl(`#!/usr/bin/env bash
# Smoke tests run after every deploy.
# Usage: ./scripts/api-smoke-test.sh [staging|production]
set -euo pipefail

ENV="${1:-staging}"
BASE="https://api.${ENV}.northwind.io"
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== health"
curl -fsS "$BASE/healthz" | jq -e '.status == "ok"' >/dev/null || fail health

echo "== latest release exists on GitHub"
curl -fsSL \
  -H 'Accept: application/vnd.github+json' \
  -H 'Authorization: Bearer «github-pat»' \
  -H 'X-GitHub-Api-Version: 2022-11-28' \
  https://api.github.com/repos/northwind/orders-api/releases/latest | jq -r .tag_name

echo "== admin metrics (basic auth)"
curl -fsS -u 'smoke:«basic-auth-password»' "$BASE/admin/metrics" >/dev/null || fail admin-metrics
curl -fsS -H "Authorization: Basic «basic-auth-credentials»" https://grafana.northwind.io/api/health

echo "== model providers"
curl -fsS https://api.anthropic.com/v1/messages \
  -H 'x-api-key: «anthropic-api-key»' \
  -H 'anthropic-version: 2023-06-01' \
  -H 'content-type: application/json' \
  -d '{"model":"claude-3-5-haiku-latest","max_tokens":16,"messages":[{"role":"user","content":"ping"}]}' | jq -r '.content[0].text'
curl -fsS https://api.openai.com/v1/models -H "Authorization: Bearer «openai-api-key»" | jq '.data | length'

echo "== metrics pipeline"
NOW=$(date +%s)
curl -fsS -X POST "https://api.datadoghq.eu/api/v2/series" \
  -H "Accept: application/json" \
  -H "Content-Type: application/json" \
  -H "DD-API-KEY: «datadog-api-key»" \
  -d @- <<EOF
{"series":[{"metric":"smoke.run","type":0,"points":[{"timestamp":${NOW},"value":1}],"tags":["env:${ENV}"]}]}
EOF
curl -fsS -X POST https://api.eu.newrelic.com/graphql \
  -H 'Content-Type: application/json' \
  -H 'API-Key: «newrelic-user-api-key»' \
  -d '{"query":"{ actor { user { name } } }"}' >/dev/null

echo "== sms"
curl -fsS -X POST "https://api.twilio.com/2010-04-01/Accounts/AC«hex:32#sid»/Messages.json" \
  --data-urlencode "To=+31«digits:9»" \
  --data-urlencode "From=+4420«digits:8»" \
  --data-urlencode "Body=smoke test ${ENV}" \
  -u "AC«hex:32#sid»:«twilio-auth-token»" >/dev/null

echo "== notify"
curl -fsS -H "Content-Type: application/json" -X POST \
  -d '{"content":"smoke tests passed on '"$ENV"'"}' \
  https://discord.com/api/webhooks/«discord-webhook-url»
curl -fsS -X POST -H 'Content-type: application/json' \
  --data '{"text":"smoke tests passed on '"$ENV"'"}' \
  https://hooks.slack.com/services/«slack-webhook-url»
echo "all smoke tests passed"
`)},

		{"positive/shell/deploy.sh", tmpl(`#!/bin/sh
# deploy.sh — ship the storefront to Heroku and the workers to DigitalOcean.
# Run from the repo root on the release laptop. Requires heroku, doctl, kubectl, vault.
set -eu

export HEROKU_API_KEY=«heroku-api-key»
export DIGITALOCEAN_ACCESS_TOKEN=«digitalocean-pat»
export VAULT_ADDR=https://vault.northwind.io:8200
export VAULT_TOKEN=«vault-token»
export PULUMI_ACCESS_TOKEN=«pulumi-access-token»
export DOCKER_BUILDKIT=1

VERSION=$(git describe --tags --always)
echo "deploying ${VERSION}"

# 1. storefront
heroku container:login
heroku container:push web --app northwind-storefront --arg VERSION="${VERSION}"
heroku container:release web --app northwind-storefront

# 2. schema changes (mysql, run once per release)
for f in migrations/pending/*.sql; do
  echo "applying ${f}"
  mysql -h storefront-db.internal -u storefront -p'«mysql-password»' storefront < "${f}"
done

# 3. refresh reporting views
psql "postgresql://reporting:«postgres-password»@reporting-db.internal:5432/reporting" \
  -c 'REFRESH MATERIALIZED VIEW CONCURRENTLY daily_sales'

# 4. workers
doctl kubernetes cluster kubeconfig save workers-ams3
doppler secrets download --token «doppler-token» --no-file --format env > /tmp/workers.env
kubectl -n workers create secret generic workers-env --from-env-file=/tmp/workers.env --dry-run=client -o yaml | kubectl apply -f -
rm -f /tmp/workers.env
kubectl -n workers set image deployment/notifications notifications="registry.digitalocean.com/northwind/notifications:${VERSION}"
kubectl -n workers rollout status deployment/notifications --timeout=5m

# 5. infra drift check
pulumi stack select northwind/workers/prod
pulumi preview --diff --non-interactive

vault kv patch secret/releases/storefront version="${VERSION}" deployed_at="$(date -u +%FT%TZ)"
echo "done"
`)},

		{"positive/shell/bash_history.txt", func(x *expander) string {
			noise := []string{
				"ls -la", "git status", "git pull --rebase", "git log --oneline -15", "cd ~/src/northwind/orders-api",
				"make test", "go test ./... -run TestRefund -count=1", "docker compose up -d db redis", "docker compose logs -f api",
				"kubectl -n orders get pods -o wide", "kubectl -n orders logs deploy/orders-api --since=10m | grep -i error",
				"k9s -n orders", "htop", "df -h", "du -sh node_modules", "npm run dev", "npm test -- --watch",
				"python -m venv .venv && source .venv/bin/activate", "pip install -r requirements-dev.txt", "pytest -x -q tests/billing",
				"vim config/settings.py", "code .", "git checkout -b fix/refund-rounding", "git commit -am 'fix refund rounding for JPY'",
				"git push -u origin HEAD", "gh pr create --fill", "jq '.items | length' /tmp/events.json", "terraform plan -out=tfplan",
				"aws sts get-caller-identity --profile prod-admin", "aws s3 ls s3://northwind-storefront-assets/ --profile prod-admin",
				"ssh bastion-1", "history | grep kubectl", "brew upgrade", "clear",
			}
			return x.lines(40, noise...) + x.expand(`export OPENAI_API_KEY=«openai-legacy-api-key»
python scripts/summarize_tickets.py --since 2025-02-01 --limit 200
`) + x.lines(25, noise...) + x.expand(`gh auth login --with-token <<< «github-oauth»
gh pr list --author @me
npm config set //registry.npmjs.org/:_authToken «npm-token»
npm publish --access public
docker login -u northwindci --password «dockerhub-pat»
`) + x.lines(25, noise...) + x.expand(`redis-cli -h redis-prod.internal -a «redis-password» --no-auth-warning INFO keyspace
mongosh "mongodb+srv://admin:«mongodb-password»@cluster0.«lower:5».mongodb.net/orders"
git remote set-url origin https://oauth2:«gitlab-pat»@gitlab.com/northwind/data-pipelines.git
`) + x.lines(25, noise...) + x.expand(`aws configure set aws_secret_access_key «aws-secret-access-key» --profile prod-admin
stripe listen --api-key «stripe-secret-key» --forward-to localhost:3000/webhooks/stripe
curl -s --user 'api:«mailgun-api-key»' https://api.eu.mailgun.net/v3/mg.northwind.io/events | jq '.items[0]'
`) + x.lines(20, noise...) + x.expand(`ssh-keygen -t ed25519 -C "maria@mbp-2023"
curl -s -H "Authorization: Bearer «slack-user-token»" "https://slack.com/api/conversations.history?channel=C0«upper:9»&limit=50" | jq '.messages[].text'
curl -s "https://elastic:«url-password»@search.northwind.internal:9200/_cat/indices?v&s=store.size:desc" | head
curl -s -H "Authorization: Bearer «jwt-es256»" https://sts.amazonaws.com/ -d Action=AssumeRoleWithWebIdentity
`) + x.lines(15, noise...)
		}},
	}
}

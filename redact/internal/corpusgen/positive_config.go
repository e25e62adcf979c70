package main

// yamlFiles are Kubernetes manifests, CI workflows, compose files and Helm values.
func yamlFiles() []positiveFile {
	return []positiveFile{
		{"positive/yaml/reporting-k8s.yaml", tmpl(`apiVersion: v1
kind: Namespace
metadata:
  name: reporting
  labels:
    app.kubernetes.io/part-of: analytics
    pod-security.kubernetes.io/enforce: restricted
---
apiVersion: v1
kind: Secret
metadata:
  name: reporting-env
  namespace: reporting
type: Opaque
stringData:
  DATABASE_URL: postgres://reporting:«postgres-password»@reporting-db.reporting.svc:5432/reporting
  OPENAI_API_KEY: «openai-api-key»
  MAILCHIMP_API_KEY: «mailchimp-api-key»
  REPORT_RECIPIENTS: finance@northwind.io,ops@northwind.io
---
apiVersion: v1
kind: Secret
metadata:
  name: reporting-tls
  namespace: reporting
type: kubernetes.io/tls
stringData:
  tls.crt: |
    «cert|indent:4»
  tls.key: |
    «pkcs8-private-key|indent:4»
---
apiVersion: v1
kind: Secret
metadata:
  name: sops-age
  namespace: flux-system
type: Opaque
stringData:
  age.agekey: «age-secret-key»
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: reporting-config
  namespace: reporting
data:
  REPORT_TIMEZONE: Europe/Amsterdam
  REPORT_CRON: "0 6 * * 1-5"
  PRIMARY_KEY_COLUMN: id
  TOKEN_BUDGET_PER_REPORT: "8000"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: reporting
  namespace: reporting
  labels:
    app: reporting
spec:
  replicas: 2
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      app: reporting
  template:
    metadata:
      labels:
        app: reporting
      annotations:
        checksum/config: «hex:64»
    spec:
      serviceAccountName: reporting
      securityContext:
        runAsNonRoot: true
        runAsUser: 10001
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: reporting
          image: ghcr.io/northwind/reporting@sha256:«hex:64»
          ports:
            - containerPort: 8080
              name: http
          envFrom:
            - secretRef:
                name: reporting-env
          env:
            - name: SLACK_BOT_TOKEN
              value: «slack-bot-token»
            - name: SQUARE_ACCESS_TOKEN
              value: "«square-access-token»"
            - name: DB_PASSWORD
              valueFrom:
                secretKeyRef:
                  name: reporting-db
                  key: password
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
          readinessProbe:
            httpGet:
              path: /readyz
              port: http
            periodSeconds: 10
          resources:
            requests:
              cpu: 100m
              memory: 256Mi
            limits:
              memory: 512Mi
          volumeMounts:
            - name: tls
              mountPath: /etc/tls
              readOnly: true
      volumes:
        - name: tls
          secret:
            secretName: reporting-tls
---
apiVersion: v1
kind: Service
metadata:
  name: reporting
  namespace: reporting
spec:
  selector:
    app: reporting
  ports:
    - name: http
      port: 80
      targetPort: http
`)},

		{"positive/yaml/release-workflow.yaml", tmpl(`name: release

on:
  push:
    tags: ["v*"]
  workflow_dispatch:
    inputs:
      dry_run:
        description: Build without publishing
        type: boolean
        default: false

permissions:
  contents: write
  id-token: write
  packages: write

env:
  REGISTRY: ghcr.io
  IMAGE_NAME: ${{ github.repository }}
  # maria: move to repository secrets before the repo goes public
  NPM_TOKEN: «npm-token»

concurrency:
  group: release-${{ github.ref }}
  cancel-in-progress: false

jobs:
  publish:
    runs-on: ubuntu-24.04
    timeout-minutes: 30
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 0

      - uses: actions/setup-node@v4
        with:
          node-version: 20
          registry-url: https://registry.npmjs.org
          cache: npm

      - run: npm ci
      - run: npm run build
      - run: npm test -- --reporter=dot

      - name: Publish package
        if: ${{ !inputs.dry_run }}
        run: npm publish --provenance --access public
        env:
          NODE_AUTH_TOKEN: ${{ secrets.NPM_TOKEN }}

      - uses: docker/setup-buildx-action@v3

      - uses: docker/login-action@v3
        with:
          username: northwindci
          password: «dockerhub-pat»

      - uses: docker/build-push-action@v6
        with:
          push: ${{ !inputs.dry_run }}
          platforms: linux/amd64,linux/arm64
          tags: northwind/sdk-playground:${{ github.ref_name }}

      - name: Upload source maps
        env:
          SENTRY_AUTH_TOKEN: «sentry-org-token»
          SENTRY_ORG: northwind
          SENTRY_PROJECT: sdk-js
        run: npx @sentry/cli sourcemaps upload --release "${{ github.ref_name }}" ./dist

      - name: Publish Python wheel
        run: |
          python -m pip install --upgrade build twine
          python -m build
          python -m twine upload dist/*
        env:
          TWINE_USERNAME: __token__
          TWINE_PASSWORD: «pypi-token»

      - name: Trigger docs rebuild
        run: |
          curl -fsS -X POST https://adb-«digits:16».«num:1:19».azuredatabricks.net/api/2.1/jobs/run-now \
            -H "Authorization: Bearer «databricks-token»" \
            -d '{"job_id": «num:1000:9999», "job_parameters": {"version": "${{ github.ref_name }}"}}'

      - name: Notify
        if: always()
        uses: slackapi/slack-github-action@v2
        with:
          webhook: https://hooks.slack.com/services/«slack-webhook-url»
          webhook-type: incoming-webhook
          payload: |
            text: "release ${{ github.ref_name }}: ${{ job.status }}"
`)},

		{"positive/yaml/docker-compose.yaml", tmpl(`name: orders

services:
  db:
    image: postgres:16-alpine
    restart: unless-stopped
    environment:
      POSTGRES_USER: orders
      POSTGRES_PASSWORD: «generic-password»
      POSTGRES_DB: orders
    volumes:
      - pgdata:/var/lib/postgresql/data
    healthcheck:
      test: ["CMD-SHELL", "pg_isready -U orders"]
      interval: 5s
      retries: 10

  redis:
    image: redis:7.4-alpine
    command: ["redis-server", "--appendonly", "yes", "--requirepass", "«redis-password»"]
    volumes:
      - redisdata:/data

  rabbitmq:
    image: rabbitmq:4.0-management-alpine
    environment:
      RABBITMQ_DEFAULT_USER: orders
      RABBITMQ_DEFAULT_PASS: "«generic-password»"
    ports:
      - "15672:15672"

  mongo:
    image: mongo:8.0
    environment:
      MONGO_INITDB_ROOT_USERNAME: root
      MONGO_INITDB_ROOT_PASSWORD: «generic-password»

  api:
    image: ghcr.io/northwind/orders-api:2.14.3
    depends_on:
      db:
        condition: service_healthy
      redis:
        condition: service_started
    ports:
      - "3000:3000"
    environment:
      - NODE_ENV=production
      - DATABASE_URL=postgres://orders:«postgres-password»@db:5432/orders
      - RABBITMQ_URL=amqp://orders:«amqp-password»@rabbitmq:5672/
      - MONGO_URL=mongodb://root:«mongodb-password»@mongo:27017/?authSource=admin
      - PASSWORD_MIN_LENGTH=12
      - TOKEN_TTL_SECONDS=900

  grafana:
    image: grafana/grafana:11.4.0
    environment:
      GF_SECURITY_ADMIN_USER: admin
      GF_SECURITY_ADMIN_PASSWORD: '«generic-password»'
      GF_AUTH_ANONYMOUS_ENABLED: "false"
    ports:
      - "3001:3000"

volumes:
  pgdata:
  redisdata:
`)},

		{"positive/yaml/platform-helm-values.yaml", tmpl(`# Values for the platform umbrella chart (production).
# helm upgrade --install platform ./charts/platform -f values-prod.yaml
global:
  domain: northwind.io
  imageRegistry: ghcr.io/northwind
  imagePullSecrets:
    - name: ghcr-pull

sentry:
  enabled: true
  dsn: https://«hex:32»@o«num:100000:999999».ingest.de.sentry.io/«num:1000000:9999999»
  authToken: «sentry-org-token»
  release:
    setCommits: auto

datadog:
  site: datadoghq.eu
  apiKey: «datadog-api-key»
  appKey: «datadog-app-key»
  logs:
    enabled: true
    containerCollectAll: true
  apm:
    portEnabled: true

oauth2-proxy:
  config:
    clientID: «uuid»
    clientSecret: «azure-ad-client-secret»
    cookieSecret: «generic-secret»
    configFile: |-
      provider = "entra-id"
      oidc_issuer_url = "https://login.microsoftonline.com/«uuid»/v2.0"
      email_domains = ["northwind.io"]
      cookie_secure = true
      skip_provider_button = true

airflow:
  dags:
    gitSync:
      enabled: true
      repo: git@github.com:northwind/dags.git
      branch: main
      sshKeySecret: ""
      sshKey: |
        «openssh-private-key|indent:8»
      knownHosts: |
        github.com «ssh-ed25519-pub»

mongodb:
  architecture: replicaset
  auth:
    rootUser: root
    rootPassword: «generic-password»
    usernames: [app]
    databases: [app]
    existingSecret: ""

externalDatabase:
  host: platform-db.northwind.internal
  port: 5432
  user: platform
  password: «generic-password»
  database: platform

redis:
  auth:
    enabled: true
    existingSecret: platform-redis
    existingSecretPasswordKey: redis-password

ingress:
  className: nginx
  annotations:
    cert-manager.io/cluster-issuer: letsencrypt-prod
  hosts:
    - host: platform.northwind.io
      paths: ["/"]
  tls:
    - secretName: platform-tls
      hosts: [platform.northwind.io]
`)},

		{"positive/yaml/kubeconfig.yaml", tmpl(`apiVersion: v1
kind: Config
preferences: {}
current-context: prod-eks
clusters:
- cluster:
    certificate-authority-data: «cert-b64»
    server: https://«hex:32».gr7.eu-west-1.eks.amazonaws.com
  name: prod-eks
- cluster:
    certificate-authority-data: «cert-b64»
    server: https://northwind-aks-«hex:8».hcp.westeurope.azmk8s.io:443
  name: analytics-aks
contexts:
- context:
    cluster: prod-eks
    namespace: ci
    user: ci-deployer
  name: prod-eks
- context:
    cluster: analytics-aks
    user: clusterUser_rg-analytics_northwind-aks
  name: analytics-aks
- context:
    cluster: prod-eks
    user: oidc
  name: prod-eks-oidc
users:
- name: ci-deployer
  user:
    token: «jwt-k8s»
- name: clusterUser_rg-analytics_northwind-aks
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: kubelogin
      args:
      - get-token
      - --login
      - spn
      - --environment
      - AzurePublicCloud
      - --server-id
      - 6dae42f8-4368-4678-94ff-3960e28e3630
      - --client-id
      - «uuid»
      - --client-secret
      - «azure-ad-client-secret»
      - --tenant-id
      - «uuid»
      provideClusterInfo: false
- name: oidc
  user:
    auth-provider:
      config:
        client-id: kubernetes
        client-secret: «generic-secret»
        id-token: «jwt»
        idp-issuer-url: https://login.northwind.io/
      name: oidc
`)},
	}
}

// hclFiles are Terraform configuration and variable files.
func hclFiles() []positiveFile {
	return []positiveFile{
		{"positive/terraform/providers.tf", tmpl(`terraform {
  required_version = ">= 1.9.0"

  cloud {
    organization = "northwind"
    workspaces {
      name = "prod-core"
    }
  }

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.80"
    }
    google = {
      source  = "hashicorp/google"
      version = "~> 6.14"
    }
    azurerm = {
      source  = "hashicorp/azurerm"
      version = "~> 4.14"
    }
    github = {
      source  = "integrations/github"
      version = "~> 6.4"
    }
    datadog = {
      source  = "DataDog/datadog"
      version = "~> 3.49"
    }
    heroku = {
      source  = "heroku/heroku"
      version = "~> 5.2"
    }
    digitalocean = {
      source  = "digitalocean/digitalocean"
      version = "~> 2.46"
    }
  }
}

# NB: these were pasted in during the March incident; move them to the workspace variables.
provider "aws" {
  region     = "eu-west-1"
  access_key = "«aws-access-key-id»"
  secret_key = "«aws-secret-access-key»"

  default_tags {
    tags = {
      ManagedBy = "terraform"
      Workspace = "prod-core"
    }
  }
}

provider "google" {
  project     = "northwind-analytics-prod"
  region      = "europe-west1"
  credentials = <<-EOT
    {
      "type": "service_account",
      "project_id": "northwind-analytics-prod",
      "private_key_id": "«hex:40»",
      "private_key": "«gcp-service-account-key|json»\n",
      "client_email": "terraform@northwind-analytics-prod.iam.gserviceaccount.com",
      "client_id": "1«digits:20»",
      "auth_uri": "https://accounts.google.com/o/oauth2/auth",
      "token_uri": "https://oauth2.googleapis.com/token"
    }
  EOT
}

provider "azurerm" {
  features {}
  subscription_id = "«uuid»"
  tenant_id       = "«uuid»"
  client_id       = "«uuid»"
  client_secret   = "«azure-ad-client-secret»"
}

provider "github" {
  owner = "northwind"
  token = "«github-pat»"
}

provider "datadog" {
  api_url = "https://api.datadoghq.eu/"
  api_key = "«datadog-api-key»"
  app_key = "«datadog-app-key»"
}

provider "heroku" {
  email   = "ops@northwind.io"
  api_key = "«heroku-api-key»"
}

provider "digitalocean" {
  token = "«digitalocean-pat»"
}

locals {
  maps_browser_key = "«gcp-api-key»"
  common_tags = {
    team        = "platform"
    cost_center = "cc-1042"
  }
}

resource "aws_db_instance" "analytics" {
  identifier              = "analytics-prod"
  engine                  = "postgres"
  engine_version          = "16.4"
  instance_class          = "db.r6g.xlarge"
  allocated_storage       = 500
  username                = "analytics_admin"
  password                = "«generic-password»"
  backup_retention_period = 14
  deletion_protection     = true
  storage_encrypted       = true
  tags                    = local.common_tags
}
`)},

		{"positive/terraform/prod.tfvars", tmpl(`# prod.tfvars — applied by the release pipeline
environment         = "production"
region              = "eu-west-1"
availability_zones  = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
instance_type       = "m7g.large"
min_size            = 3
max_size            = 12
enable_deletion_protection = true

db_username = "ledger_admin"
db_password = "«generic-password»"

alerting = {
  slack_webhook_url = "https://hooks.slack.com/services/«slack-webhook-url»"
  pagerduty_service = "P«upper:6»"
  email             = "oncall@northwind.io"
}

newrelic_account_id = «num:1000000:9999999»
newrelic_api_key    = "«newrelic-user-api-key»"

databricks_host  = "https://adb-«digits:16».«num:1:19».azuredatabricks.net"
databricks_token = "«databricks-token»"

vault_address = "https://vault.northwind.io:8200"
vault_token   = "«vault-token»"

grafana_url  = "https://grafana.northwind.io"
grafana_auth = "«grafana-service-account-token»"

doppler_token = "«doppler-token»"

sendgrid_api_key = "«sendgrid-api-key»"
linear_api_key   = "«linear-api-key»"

tags = {
  owner       = "platform"
  cost_center = "cc-1042"
  data_class  = "internal"
}
`)},
	}
}

// codeFiles are Python and JavaScript sources with hard-coded credentials.
func codeFiles() []positiveFile {
	return []positiveFile{
		{"positive/code/settings_production.py", tmpl(`"""
Django settings for the northwind billing project (production).

Generated by 'django-admin startproject' using Django 5.1.
"""
from pathlib import Path

import sentry_sdk

BASE_DIR = Path(__file__).resolve().parent.parent.parent

# SECURITY WARNING: keep the secret key used in production secret!
SECRET_KEY = "«django-secret-key»"

DEBUG = False
ALLOWED_HOSTS = ["app.northwind.io", ".northwind.internal"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_celery_results",
    "social_django",
    "accounts",
    "billing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "northwind.urls"
WSGI_APPLICATION = "northwind.wsgi.application"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "billing",
        "USER": "billing",
        "PASSWORD": "«generic-password»",
        "HOST": "billing-db.northwind.internal",
        "PORT": "5432",
        "CONN_MAX_AGE": 60,
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

CELERY_BROKER_URL = "amqp://billing:«amqp-password»@rabbitmq.northwind.internal:5672/billing"
CELERY_RESULT_BACKEND = "django-db"

EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
EMAIL_HOST = "smtp.sendgrid.net"
EMAIL_PORT = 587
EMAIL_USE_TLS = True
EMAIL_HOST_USER = "apikey"
EMAIL_HOST_PASSWORD = "«sendgrid-api-key»"
DEFAULT_FROM_EMAIL = "billing@northwind.io"

# S3 storage for invoices
AWS_ACCESS_KEY_ID = "«aws-access-key-id»"
AWS_SECRET_ACCESS_KEY = "«aws-secret-access-key»"
AWS_STORAGE_BUCKET_NAME = "northwind-invoices"
AWS_S3_REGION_NAME = "eu-west-1"

STRIPE_SECRET_KEY = "«stripe-restricted-key»"
STRIPE_API_VERSION = "2024-06-20"

GEOCODER_API_KEY = "«generic-api-key»"
GEOCODER_TIMEOUT_SECONDS = 5

SOCIAL_AUTH_GITHUB_KEY = "Iv1.«hex:16»"
SOCIAL_AUTH_GITHUB_SECRET = "«generic-secret»"
SOCIAL_AUTH_GITHUB_SCOPE = ["read:org"]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "Europe/Amsterdam"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "INFO"},
}

sentry_sdk.init(
    dsn="https://«hex:32»@o«num:100000:999999».ingest.de.sentry.io/«num:1000000:9999999»",
    traces_sample_rate=0.05,
    send_default_pii=False,
)
`)},

		{"positive/code/bot-config.js", tmpl(`// config/production.js
// Loaded by src/index.js when NODE_ENV=production.
'use strict';

const path = require('node:path');

module.exports = {
  port: Number(process.env.PORT || 8080),
  logLevel: 'info',
  dataDir: path.join(__dirname, '..', 'data'),

  openai: {
    apiKey: '«openai-api-key»',
    model: 'gpt-4o-mini',
    maxTokens: 512,
  },

  discord: {
    token: '«discord-bot-token»',
    guildId: '1«digits:18»',
    commandPrefix: '!',
  },

  telegram: {
    botToken: '«telegram-bot-token»',
    pollingIntervalMs: 1500,
  },

  twilio: {
    accountSid: 'AC«hex:32»',
    apiKey: '«twilio-api-key»',
    apiSecret: '«twilio-api-secret»',
    fromNumber: '+4420«digits:8»',
  },

  mongo: {
    uri: 'mongodb+srv://bot:«mongodb-password»@cluster0.«lower:5».mongodb.net/bot?retryWrites=true&w=majority',
    options: { maxPoolSize: 10 },
  },

  session: {
    jwtSecret: '«generic-secret»',
    ttlSeconds: 60 * 60 * 24,
  },

  shopify: {
    shop: 'northwind-store.myshopify.com',
    accessToken: '«shopify-access-token»',
    apiVersion: '2024-10',
  },

  square: {
    accessToken: '«square-access-token»',
    environment: 'production',
    locationId: 'L«upper:12»',
  },

  // Firebase web config (client side)
  firebase: {
    apiKey: '«gcp-api-key»',
    authDomain: 'northwind-bot.firebaseapp.com',
    projectId: 'northwind-bot',
    storageBucket: 'northwind-bot.appspot.com',
    messagingSenderId: '«digits:12»',
    appId: '1:«digits:12»:web:«hex:22»',
  },

  features: {
    keyboardShortcuts: true,
    passwordlessLogin: false,
  },
};
`)},

		{"positive/code/ingest_notebook.py", tmpl(`# %% [markdown]
# # Support ticket enrichment
# Pulls the last 30 days of tickets, embeds them and writes clusters back to the warehouse.
# Owner: data-platform. Run on the shared notebook server, kernel "py312-ml".

# %%
import datetime as dt
import os

import anthropic
import boto3
import cohere
import pandas as pd
from huggingface_hub import login
from sqlalchemy import create_engine

# %%
login(token="«huggingface-token»")

engine = create_engine("postgresql+psycopg://etl:«postgres-password»@warehouse.internal:5432/analytics")
s3 = boto3.client(
    "s3",
    aws_access_key_id="«aws-access-key-id»",
    aws_secret_access_key="«aws-secret-access-key»",
    region_name="eu-west-1",
)

# %%
since = dt.date.today() - dt.timedelta(days=30)
tickets = pd.read_sql(
    "select id, subject, body, created_at from support.tickets where created_at >= %(since)s",
    engine,
    params={"since": since},
)
print(len(tickets), "tickets")

# %%
co = cohere.ClientV2(api_key="«cohere-api-key»")
resp = co.embed(
    texts=tickets["subject"].fillna("").tolist(),
    model="embed-english-v3.0",
    input_type="clustering",
    embedding_types=["float"],
)
tickets["embedding"] = resp.embeddings.float_

# %%
claude = anthropic.Anthropic(api_key="«anthropic-api-key»")
def label_cluster(samples):
    msg = claude.messages.create(
        model="claude-3-5-haiku-latest",
        max_tokens=50,
        messages=[{"role": "user", "content": "Name this group of tickets in 3 words:\n" + "\n".join(samples)}],
    )
    return msg.content[0].text.strip()

# %%
out = tickets.drop(columns=["body"])
out.to_parquet("/tmp/ticket_clusters.parquet")
s3.upload_file("/tmp/ticket_clusters.parquet", "northwind-analytics", f"clusters/{since:%Y-%m-%d}.parquet")
`)},
	}
}

// configFiles are credential files as "cat" prints them.
func configFiles() []positiveFile {
	return []positiveFile{
		{"positive/config/aws-credentials.ini", tmpl(`[default]
aws_access_key_id = «aws-access-key-id»
aws_secret_access_key = «aws-secret-access-key»

[prod-admin]
aws_access_key_id = «aws-access-key-id»
aws_secret_access_key = «aws-secret-access-key»

[sso-dev]
sso_session = northwind
sso_account_id = «digits:12»
sso_role_name = Developer
region = eu-west-1
output = json

[incident-2025-03]
aws_access_key_id = «aws-sts-access-key-id»
aws_secret_access_key = «aws-secret-access-key»
aws_session_token = «aws-session-token»
region = eu-west-1

[sso-session northwind]
sso_start_url = https://northwind.awsapps.com/start
sso_region = eu-west-1
sso_registration_scopes = sso:account:access
`)},

		{"positive/config/dotfiles.txt", tmpl(`$ head -n 40 ~/.npmrc ~/.pypirc ~/.netrc ~/.git-credentials ~/.terraform.d/credentials.tfrc.json ~/.config/gh/hosts.yml
==> /home/maria/.npmrc <==
@northwind:registry=https://npm.pkg.github.com/
//npm.pkg.github.com/:_authToken=«github-pat»
//registry.npmjs.org/:_authToken=«npm-token»
save-exact=true
fund=false

==> /home/maria/.pypirc <==
[distutils]
index-servers =
    pypi
    testpypi

[pypi]
username = __token__
password = «pypi-token»

[testpypi]
repository = https://test.pypi.org/legacy/
username = __token__

==> /home/maria/.netrc <==
machine api.heroku.com
  login maria@northwind.io
  password «heroku-api-key#h»
machine git.heroku.com
  login maria@northwind.io
  password «heroku-api-key#h»
machine nexus.northwind.io
  login deploy
  password «basic-auth-password»

==> /home/maria/.git-credentials <==
https://maria-lopez:«github-fine-grained-pat»@github.com
https://oauth2:«gitlab-pat»@gitlab.com
https://deploy:«url-password»@git.northwind.internal

==> /home/maria/.terraform.d/credentials.tfrc.json <==
{
  "credentials": {
    "app.terraform.io": {
      "token": "«terraform-cloud-token»"
    }
  }
}

==> /home/maria/.config/gh/hosts.yml <==
github.com:
    users:
        maria-lopez:
            oauth_token: «github-oauth#gh»
    git_protocol: https
    oauth_token: «github-oauth#gh»
    user: maria-lopez
`)},

		{"positive/config/ssh-and-tls-keys.txt", tmpl(`deploy@ci-runner-07:~$ ls -la ~/.ssh /etc/ssl/private
/home/deploy/.ssh:
total 28
drwx------ 2 deploy deploy 4096 Mar  4 10:21 .
drwxr-x--- 9 deploy deploy 4096 Mar  4 10:19 ..
-rw------- 1 deploy deploy  402 Feb 11 09:03 authorized_keys
-rw------- 1 deploy deploy 1679 Feb 11 09:03 id_rsa
-rw-r--r-- 1 deploy deploy  400 Feb 11 09:03 id_rsa.pub
-rw------- 1 deploy deploy  411 Feb 11 09:05 id_ed25519
-rw-r--r-- 1 deploy deploy  101 Feb 11 09:05 id_ed25519.pub
-rw-r--r-- 1 deploy deploy 2216 Mar  2 16:40 known_hosts

/etc/ssl/private:
total 16
drwx--x--- 2 root ssl-cert 4096 Jan 20 12:00 .
-rw-r----- 1 root ssl-cert 1704 Jan 20 12:00 api.northwind.io.key
-rw-r----- 1 root ssl-cert  227 Jan 20 12:00 edge.key
deploy@ci-runner-07:~$ cat ~/.ssh/id_rsa
«rsa-private-key»
deploy@ci-runner-07:~$ cat ~/.ssh/id_rsa.pub
«ssh-rsa-pub» deploy@ci-runner-07
deploy@ci-runner-07:~$ cat ~/.ssh/id_ed25519
«openssh-private-key»
deploy@ci-runner-07:~$ ssh-keygen -lf ~/.ssh/id_ed25519.pub
256 SHA256:«b64raw:32» deploy@ci-runner-07 (ED25519)
deploy@ci-runner-07:~$ sudo cat /etc/ssl/private/api.northwind.io.key
«pkcs8-private-key»
deploy@ci-runner-07:~$ sudo cat /etc/ssl/private/edge.key
«ec-private-key»
deploy@ci-runner-07:~$ openssl x509 -in /etc/ssl/certs/api.northwind.io.pem -noout -subject -issuer -enddate
subject=CN=api.northwind.io
issuer=C=US, O=Let's Encrypt, CN=R11
notAfter=Apr 20 11:59:59 2025 GMT
`)},
	}
}

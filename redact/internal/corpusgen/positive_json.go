package main

import "strings"

// jsonFiles are API responses and JSON files as tools print them.
func jsonFiles() []positiveFile {
	return []positiveFile{
		{"positive/api/sts-assume-role.json", tmpl(`{
    "Credentials": {
        "AccessKeyId": "«aws-sts-access-key-id»",
        "SecretAccessKey": "«aws-secret-access-key»",
        "SessionToken": "«aws-session-token»",
        "Expiration": "«ts:sec»"
    },
    "AssumedRoleUser": {
        "AssumedRoleId": "AROA«b32:17»:terraform-ci-«digits:10#session»",
        "Arn": "arn:aws:sts::«digits:12»:assumed-role/TerraformDeployer/terraform-ci-«digits:10#session»"
    },
    "PackedPolicySize": 6,
    "SourceIdentity": "ci-runner-«num:1:24»"
}
`)},

		{"positive/api/vault-kv-get.json", tmpl(`{
  "request_id": "«uuid»",
  "lease_id": "",
  "lease_duration": 0,
  "renewable": false,
  "data": {
    "data": {
      "api_base": "https://api.stripe.com",
      "stripe_secret_key": "«stripe-secret-key»",
      "sendgrid": "«sendgrid-api-key»",
      "value": "«slack-bot-token»",
      "note": "status page alerts still go through https://hooks.slack.com/services/«slack-webhook-url» until the new notifier ships",
      "owner": "payments-platform",
      "rotation_days": 90,
      "last_rotated_by": "maria.lopez@northwind.io"
    },
    "metadata": {
      "created_time": "«ts:micro»",
      "custom_metadata": {
        "pagerduty_service": "P«upper:6»",
        "team": "payments"
      },
      "deletion_time": "",
      "destroyed": false,
      "version": 14
    }
  },
  "wrap_info": null,
  "warnings": null,
  "auth": null,
  "mount_type": "kv"
}
`)},

		{"positive/api/gcp-service-account-key.json", tmpl(`{
  "type": "service_account",
  "project_id": "northwind-analytics-prod",
  "private_key_id": "«hex:40»",
  "private_key": "«gcp-service-account-key|json»\n",
  "client_email": "bq-loader@northwind-analytics-prod.iam.gserviceaccount.com",
  "client_id": "1«digits:20»",
  "auth_uri": "https://accounts.google.com/o/oauth2/auth",
  "token_uri": "https://oauth2.googleapis.com/token",
  "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
  "client_x509_cert_url": "https://www.googleapis.com/robot/v1/metadata/x509/bq-loader%40northwind-analytics-prod.iam.gserviceaccount.com",
  "universe_domain": "googleapis.com"
}
`)},

		{"positive/api/gitlab-project-variables.json", func(x *expander) string {
			v := func(key, value, typ string, protected, masked bool, scope, desc string) string {
				b := func(v bool) string {
					if v {
						return "true"
					}
					return "false"
				}
				d := "null"
				if desc != "" {
					d = `"` + desc + `"`
				}
				return `  {
    "variable_type": "` + typ + `",
    "key": "` + key + `",
    "value": "` + value + `",
    "hidden": false,
    "protected": ` + b(protected) + `,
    "masked": ` + b(masked) + `,
    "raw": false,
    "environment_scope": "` + scope + `",
    "description": ` + d + `
  }`
			}
			items := []string{
				v("AWS_ACCESS_KEY_ID", "«aws-access-key-id»", "env_var", true, false, "production", ""),
				v("AWS_SECRET_ACCESS_KEY", "«aws-secret-access-key»", "env_var", true, true, "production", ""),
				v("AWS_DEFAULT_REGION", "eu-west-1", "env_var", false, false, "*", ""),
				v("DATABASE_URL", "postgresql://ledger:«postgres-password»@ledger-prod.cluster-c«lower:12».eu-west-1.rds.amazonaws.com:5432/ledger?sslmode=require", "env_var", true, false, "production", "Used by the migrate job only"),
				v("DEPLOY_SSH_KEY", "«openssh-private-key|json»\\n", "file", true, false, "*", "Deploy key for the infra repo (read-only)"),
				v("DIGITALOCEAN_ACCESS_TOKEN", "«digitalocean-pat»", "env_var", true, true, "staging", ""),
				v("DOCKER_HUB_USER", "northwindci", "env_var", false, false, "*", ""),
				v("DOCKER_HUB_TOKEN", "«dockerhub-pat»", "env_var", true, true, "*", ""),
				v("HELM_VERSION", "3.16.2", "env_var", false, false, "*", ""),
				v("KUBE_NAMESPACE", "ledger", "env_var", false, false, "*", ""),
				v("NPM_TOKEN", "«npm-token»", "env_var", false, true, "*", "Publish token for @northwind scope"),
				v("PYPI_API_TOKEN", "«pypi-token»", "env_var", true, true, "*", ""),
				v("SENTRY_AUTH_TOKEN", "«sentry-org-token»", "env_var", true, false, "*", "sentry-cli releases"),
				v("SONAR_HOST_URL", "https://sonar.northwind.io", "env_var", false, false, "*", ""),
			}
			return x.expand("[\n" + strings.Join(items, ",\n") + "\n]\n")
		}},

		{"positive/api/heroku-config.json", tmpl(`{
  "CLOUDAMQP_APIKEY": "«uuid»",
  "CLOUDAMQP_URL": "amqps://«lower:8#vh»:«heroku-amqp-password»@hawk.rmq.cloudamqp.com/«lower:8#vh»",
  "DATABASE_URL": "postgres://«lower:14»:«heroku-postgres-password»@ec2-«num:3:54»-«num:1:254»-«num:1:254»-«num:1:254».eu-west-1.compute.amazonaws.com:5432/«lower:14»",
  "HEROKU_APP_ID": "«uuid»",
  "HEROKU_APP_NAME": "northwind-storefront",
  "HEROKU_RELEASE_CREATED_AT": "«ts:sec»",
  "HEROKU_RELEASE_VERSION": "v«num:180:420»",
  "HEROKU_SLUG_COMMIT": "«hex:40»",
  "HEROKU_SLUG_DESCRIPTION": "Deploy «hex:7»",
  "LANG": "en_US.UTF-8",
  "MAILGUN_API_KEY": "«mailgun-api-key»",
  "MAILGUN_DOMAIN": "mg.northwind.io",
  "MAILGUN_PUBLIC_KEY": "pubkey-«hex:32»",
  "MAILGUN_SMTP_LOGIN": "postmaster@mg.northwind.io",
  "MAILGUN_SMTP_PORT": "587",
  "MAILGUN_SMTP_SERVER": "smtp.mailgun.org",
  "RACK_ENV": "production",
  "RAILS_ENV": "production",
  "RAILS_LOG_TO_STDOUT": "enabled",
  "RAILS_MASTER_KEY": "«rails-master-key»",
  "RAILS_SERVE_STATIC_FILES": "enabled",
  "REDIS_TLS_URL": "rediss://:«heroku-redis-password#r»@ec2-«num:3:54»-«num:1:254»-«num:1:254»-«num:1:254».eu-west-1.compute.amazonaws.com:«num:10000:32000#rp»",
  "REDIS_URL": "redis://:«heroku-redis-password#r»@ec2-«num:3:54»-«num:1:254»-«num:1:254»-«num:1:254».eu-west-1.compute.amazonaws.com:«num:10000:32000#rp»",
  "SENDGRID_API_KEY": "«sendgrid-api-key#sg»",
  "SENDGRID_PASSWORD": "«sendgrid-api-key#sg»",
  "SENDGRID_USERNAME": "apikey",
  "WEB_CONCURRENCY": "2"
}
`)},

		{"positive/api/docker-inspect.json", tmpl(`[
    {
        "Id": "«hex:64»",
        "Created": "«ts:micro»",
        "Path": "docker-entrypoint.sh",
        "Args": [
            "node",
            "dist/server.js"
        ],
        "State": {
            "Status": "running",
            "Running": true,
            "Paused": false,
            "Restarting": false,
            "OOMKilled": false,
            "Dead": false,
            "Pid": «num:2000:90000»,
            "ExitCode": 0,
            "Error": "",
            "StartedAt": "«ts:micro»",
            "FinishedAt": "0001-01-01T00:00:00Z",
            "Health": {
                "Status": "healthy",
                "FailingStreak": 0,
                "Log": [
                    {
                        "Start": "«ts:micro»",
                        "End": "«ts:micro»",
                        "ExitCode": 0,
                        "Output": "{\"status\":\"ok\",\"uptime\":«num:100:9000»}"
                    }
                ]
            }
        },
        "Image": "sha256:«hex:64»",
        "ResolvConfPath": "/var/lib/docker/containers/«hex:64#id»/resolv.conf",
        "HostnamePath": "/var/lib/docker/containers/«hex:64#id»/hostname",
        "HostsPath": "/var/lib/docker/containers/«hex:64#id»/hosts",
        "LogPath": "/var/lib/docker/containers/«hex:64#id»/«hex:64#id»-json.log",
        "Name": "/orders-api-1",
        "RestartCount": 0,
        "Driver": "overlay2",
        "Platform": "linux",
        "MountLabel": "",
        "ProcessLabel": "",
        "AppArmorProfile": "docker-default",
        "HostConfig": {
            "Binds": null,
            "NetworkMode": "orders_default",
            "PortBindings": {
                "3000/tcp": [
                    {
                        "HostIp": "",
                        "HostPort": "3000"
                    }
                ]
            },
            "RestartPolicy": {
                "Name": "unless-stopped",
                "MaximumRetryCount": 0
            },
            "Memory": 536870912,
            "NanoCpus": 1000000000
        },
        "Mounts": [
            {
                "Type": "volume",
                "Name": "orders_uploads",
                "Source": "/var/lib/docker/volumes/orders_uploads/_data",
                "Destination": "/app/uploads",
                "Driver": "local",
                "Mode": "z",
                "RW": true,
                "Propagation": ""
            }
        ],
        "Config": {
            "Hostname": "«hex:12»",
            "Domainname": "",
            "User": "node",
            "AttachStdin": false,
            "AttachStdout": true,
            "AttachStderr": true,
            "ExposedPorts": {
                "3000/tcp": {}
            },
            "Tty": false,
            "OpenStdin": false,
            "StdinOnce": false,
            "Env": [
                "NODE_ENV=production",
                "PORT=3000",
                "DATABASE_URL=postgres://orders:«postgres-password»@db:5432/orders",
                "REDIS_URL=redis://default:«redis-password»@redis:6379/0",
                "DD_API_KEY=«datadog-api-key»",
                "DD_SITE=datadoghq.eu",
                "DD_SERVICE=orders-api",
                "OPENAI_API_KEY=«openai-service-account-key»",
                "JWT_SIGNING_SECRET=«generic-secret»",
                "LOG_LEVEL=info",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "NODE_VERSION=20.18.1",
                "YARN_VERSION=1.22.22"
            ],
            "Cmd": [
                "node",
                "dist/server.js"
            ],
            "Healthcheck": {
                "Test": [
                    "CMD-SHELL",
                    "wget -qO- http://127.0.0.1:3000/healthz || exit 1"
                ],
                "Interval": 30000000000,
                "Timeout": 5000000000,
                "Retries": 3
            },
            "Image": "ghcr.io/northwind/orders-api:2.14.3",
            "Volumes": null,
            "WorkingDir": "/app",
            "Entrypoint": [
                "docker-entrypoint.sh"
            ],
            "OnBuild": null,
            "Labels": {
                "com.docker.compose.config-hash": "«hex:64»",
                "com.docker.compose.container-number": "1",
                "com.docker.compose.project": "orders",
                "com.docker.compose.service": "api",
                "com.docker.compose.version": "2.29.7",
                "org.opencontainers.image.revision": "«hex:40»",
                "org.opencontainers.image.source": "https://github.com/northwind/orders-api"
            }
        },
        "NetworkSettings": {
            "Bridge": "",
            "SandboxID": "«hex:64»",
            "SandboxKey": "/var/run/docker/netns/«hex:12»",
            "Ports": {
                "3000/tcp": [
                    {
                        "HostIp": "0.0.0.0",
                        "HostPort": "3000"
                    }
                ]
            },
            "Networks": {
                "orders_default": {
                    "IPAMConfig": null,
                    "Links": null,
                    "Aliases": [
                        "orders-api-1",
                        "api"
                    ],
                    "MacAddress": "02:42:ac:12:00:0«num:2:9»",
                    "NetworkID": "«hex:64»",
                    "EndpointID": "«hex:64»",
                    "Gateway": "172.18.0.1",
                    "IPAddress": "172.18.0.«num:2:9»",
                    "IPPrefixLen": 16,
                    "DNSNames": [
                        "orders-api-1",
                        "api",
                        "«hex:12»"
                    ]
                }
            }
        }
    }
]
`)},

		{"positive/api/agent-tool-result.json", tmpl(`{
  "conversation_id": "«uuid»",
  "turn": 7,
  "messages": [
    {
      "role": "assistant",
      "content": [
        {
          "type": "text",
          "text": "The chat route returns 401 from the model provider. I'll check which keys the dev server loads from .env.local."
        },
        {
          "type": "tool_use",
          "id": "toolu_01«alnum:22#call»",
          "name": "bash",
          "input": {
            "command": "cat .env.local && git status --short"
          }
        }
      ]
    },
    {
      "role": "user",
      "content": [
        {
          "type": "tool_result",
          "tool_use_id": "toolu_01«alnum:22#call»",
          "is_error": false,
          "content": "# written by scripts/bootstrap.sh on «ts:date»\nNEXT_PUBLIC_APP_URL=http://localhost:3000\nNEXT_PUBLIC_POSTHOG_HOST=https://eu.i.posthog.com\n\n# model providers\nOPENAI_API_KEY=«openai-api-key»\nOPENAI_ORG_ID=org-«alnum:24»\nANTHROPIC_API_KEY=«anthropic-api-key»\nHF_TOKEN=«huggingface-token»\nPERPLEXITY_API_KEY=«perplexity-api-key»\nCO_API_KEY=«cohere-api-key»\n\n# retrieval\nPINECONE_INDEX=docs-v3\nPINECONE_ENVIRONMENT=eu-west1-gcp\nEMBEDDING_MODEL=text-embedding-3-large\nMAX_CONTEXT_TOKENS=120000\nLANGCHAIN_TRACING_V2=false\n M src/app/api/chat/route.ts\n M src/lib/providers.ts\n?? .env.local.bak\n?? scratch/\n"
        }
      ]
    },
    {
      "role": "assistant",
      "content": [
        {
          "type": "text",
          "text": "The OpenAI key is a project key and the route sends it with the wrong organization header. Before changing the route I'll check what the webhook verifier expects."
        },
        {
          "type": "tool_use",
          "id": "toolu_01«alnum:22#call2»",
          "name": "gcp_secret_manager_access",
          "input": {
            "secret": "projects/northwind-chat-dev/secrets/webhook-signing-key",
            "version": "latest"
          }
        }
      ]
    },
    {
      "role": "user",
      "content": [
        {
          "type": "tool_result",
          "tool_use_id": "toolu_01«alnum:22#call2»",
          "is_error": false,
          "content": {
            "name": "projects/«digits:12»/secrets/webhook-signing-key/versions/3",
            "payload": {
              "data": "«generic-secret|b64»",
              "dataCrc32c": "«num:100000000:4294967295»"
            }
          }
        }
      ]
    },
    {
      "role": "assistant",
      "content": [
        {
          "type": "text",
          "text": "The verifier reads the same signing key, so only the route needs a change. I'll drop OPENAI_ORG_ID from the request and retry."
        }
      ]
    }
  ],
  "usage": {
    "input_tokens": «num:8000:22000»,
    "output_tokens": «num:100:900»,
    "cache_read_input_tokens": «num:1000:8000»
  },
  "stop_reason": "tool_use"
}
`)},

		{"positive/api/terraform.tfstate.json", tmpl(`{
  "version": 4,
  "terraform_version": "1.9.8",
  "serial": «num:20:200»,
  "lineage": "«uuid»",
  "outputs": {
    "db_endpoint": {
      "value": "orders-prod.c«lower:12#rds».eu-west-1.rds.amazonaws.com:5432",
      "type": "string"
    },
    "logs_connection_string": {
      "value": "DefaultEndpointsProtocol=https;AccountName=nwlogsprod;AccountKey=«azure-storage-account-key#k»;EndpointSuffix=core.windows.net",
      "type": "string",
      "sensitive": true
    }
  },
  "resources": [
    {
      "mode": "managed",
      "type": "aws_db_instance",
      "name": "orders",
      "provider": "provider[\"registry.terraform.io/hashicorp/aws\"]",
      "instances": [
        {
          "schema_version": 2,
          "attributes": {
            "address": "orders-prod.c«lower:12#rds».eu-west-1.rds.amazonaws.com",
            "allocated_storage": 100,
            "arn": "arn:aws:rds:eu-west-1:«digits:12#acct»:db:orders-prod",
            "backup_retention_period": 7,
            "db_name": "orders",
            "deletion_protection": true,
            "engine": "postgres",
            "engine_version": "16.4",
            "id": "db-«upper:26»",
            "instance_class": "db.r6g.large",
            "multi_az": true,
            "password": "«generic-password»",
            "port": 5432,
            "storage_encrypted": true,
            "username": "orders_admin",
            "vpc_security_group_ids": [
              "sg-0«hex:16»"
            ]
          },
          "sensitive_attributes": [
            [
              {
                "type": "get_attr",
                "value": "password"
              }
            ]
          ]
        }
      ]
    },
    {
      "mode": "managed",
      "type": "aws_iam_access_key",
      "name": "ci",
      "provider": "provider[\"registry.terraform.io/hashicorp/aws\"]",
      "instances": [
        {
          "schema_version": 0,
          "attributes": {
            "create_date": "«ts:sec»",
            "encrypted_secret": null,
            "id": "«aws-access-key-id»",
            "pgp_key": null,
            "secret": "«aws-secret-access-key»",
            "status": "Active",
            "user": "ci-deployer"
          },
          "sensitive_attributes": []
        }
      ]
    },
    {
      "mode": "managed",
      "type": "random_password",
      "name": "grafana_admin",
      "provider": "provider[\"registry.terraform.io/hashicorp/random\"]",
      "instances": [
        {
          "schema_version": 3,
          "attributes": {
            "id": "none",
            "length": 24,
            "lower": true,
            "min_numeric": 0,
            "numeric": true,
            "override_special": null,
            "result": "«generic-password»",
            "special": false,
            "upper": true
          },
          "sensitive_attributes": []
        }
      ]
    },
    {
      "mode": "managed",
      "type": "azurerm_storage_account",
      "name": "logs",
      "provider": "provider[\"registry.terraform.io/hashicorp/azurerm\"]",
      "instances": [
        {
          "schema_version": 4,
          "attributes": {
            "account_replication_type": "ZRS",
            "account_tier": "Standard",
            "id": "/subscriptions/«uuid»/resourceGroups/rg-logs-prod/providers/Microsoft.Storage/storageAccounts/nwlogsprod",
            "location": "westeurope",
            "name": "nwlogsprod",
            "primary_access_key": "«azure-storage-account-key#k»",
            "primary_blob_endpoint": "https://nwlogsprod.blob.core.windows.net/",
            "primary_connection_string": "DefaultEndpointsProtocol=https;AccountName=nwlogsprod;AccountKey=«azure-storage-account-key#k»;EndpointSuffix=core.windows.net",
            "resource_group_name": "rg-logs-prod"
          },
          "sensitive_attributes": []
        }
      ]
    },
    {
      "mode": "managed",
      "type": "auth0_client",
      "name": "storefront",
      "provider": "provider[\"registry.terraform.io/auth0/auth0\"]",
      "instances": [
        {
          "schema_version": 0,
          "attributes": {
            "app_type": "regular_web",
            "callbacks": [
              "https://shop.northwind.io/auth/callback"
            ],
            "client_id": "«alnum:32#cid»",
            "client_secret": "«auth0-client-secret»",
            "id": "«alnum:32#cid»",
            "name": "Storefront",
            "oidc_conformant": true,
            "token_endpoint_auth_method": "client_secret_post"
          },
          "sensitive_attributes": []
        }
      ]
    },
    {
      "mode": "managed",
      "type": "azuread_application_password",
      "name": "inventory",
      "provider": "provider[\"registry.terraform.io/hashicorp/azuread\"]",
      "instances": [
        {
          "schema_version": 1,
          "attributes": {
            "application_id": "/applications/«uuid»",
            "display_name": "inventory-service",
            "end_date": "«ts:sec»",
            "id": "«uuid»/password/«uuid»",
            "key_id": "«uuid»",
            "value": "«azure-ad-client-secret»"
          },
          "sensitive_attributes": [
            [
              {
                "type": "get_attr",
                "value": "value"
              }
            ]
          ]
        }
      ]
    },
    {
      "mode": "managed",
      "type": "tls_private_key",
      "name": "bastion",
      "provider": "provider[\"registry.terraform.io/hashicorp/tls\"]",
      "instances": [
        {
          "schema_version": 1,
          "attributes": {
            "algorithm": "RSA",
            "ecdsa_curve": "P224",
            "id": "«hex:40»",
            "private_key_pem": "«rsa-private-key|json»\n",
            "public_key_fingerprint_md5": "«hex:2»:«hex:2»:«hex:2»:«hex:2»:«hex:2»:«hex:2»:«hex:2»:«hex:2»:«hex:2»:«hex:2»:«hex:2»:«hex:2»:«hex:2»:«hex:2»:«hex:2»:«hex:2»",
            "public_key_openssh": "«ssh-rsa-pub»\n",
            "rsa_bits": 2048
          },
          "sensitive_attributes": []
        }
      ]
    }
  ],
  "check_results": null
}
`)},

		{"positive/api/docker-config.json", tmpl(`{
	"auths": {
		"https://index.docker.io/v1/": {
			"auth": "«basic-auth-credentials»"
		},
		"ghcr.io": {
			"auth": "«basic-auth-credentials»"
		}
	},
	"credHelpers": {
		"«digits:12».dkr.ecr.eu-west-1.amazonaws.com": "ecr-login",
		"europe-west1-docker.pkg.dev": "gcloud"
	},
	"HttpHeaders": {
		"User-Agent": "Docker-Client/27.3.1 (linux)"
	},
	"psFormat": "table {{.ID}}\t{{.Image}}\t{{.Status}}\t{{.Names}}",
	"currentContext": "default",
	"features": {
		"hooks": "true"
	}
}
`)},

		{"positive/api/slack-oauth-v2-access.json", tmpl(`{"ok":true,"app_id":"A0«upper:9»","authed_user":{"id":"U0«upper:9»","scope":"channels:history,chat:write,users:read","access_token":"«slack-user-token»","token_type":"user"},"scope":"chat:write,channels:read,commands,incoming-webhook,users:read,users:read.email","token_type":"bot","access_token":"«slack-bot-token»","bot_user_id":"U0«upper:9»","team":{"id":"T0«upper:8»","name":"Northwind"},"enterprise":null,"is_enterprise_install":false,"incoming_webhook":{"channel":"#deploys","channel_id":"C0«upper:9»","configuration_url":"https://northwind.slack.com/services/B0«upper:9»","url":"https://hooks.slack.com/services/«slack-webhook-url»"}}
`)},

		{"positive/api/github-installation-token.json", func(x *expander) string {
			repo := func(name, desc, lang string) string {
				return `    {
      "id": «num:400000000:900000000»,
      "node_id": "R_kgDO«alnum:6»",
      "name": "` + name + `",
      "full_name": "northwind/` + name + `",
      "private": true,
      "owner": {
        "login": "northwind",
        "id": «num:10000000:99999999#org»,
        "node_id": "O_kgDO«alnum:6#orgnode»",
        "avatar_url": "https://avatars.githubusercontent.com/u/«num:10000000:99999999#org»?v=4",
        "url": "https://api.github.com/users/northwind",
        "html_url": "https://github.com/northwind",
        "type": "Organization",
        "site_admin": false
      },
      "html_url": "https://github.com/northwind/` + name + `",
      "description": "` + desc + `",
      "fork": false,
      "url": "https://api.github.com/repos/northwind/` + name + `",
      "git_url": "git://github.com/northwind/` + name + `.git",
      "ssh_url": "git@github.com:northwind/` + name + `.git",
      "clone_url": "https://github.com/northwind/` + name + `.git",
      "created_at": "«ts:sec»",
      "updated_at": "«ts:sec»",
      "pushed_at": "«ts:sec»",
      "size": «num:200:90000»,
      "stargazers_count": «num:0:40»,
      "language": "` + lang + `",
      "has_issues": true,
      "forks_count": 0,
      "archived": false,
      "visibility": "private",
      "default_branch": "main",
      "permissions": {
        "admin": false,
        "maintain": false,
        "push": true,
        "triage": true,
        "pull": true
      }
    }`
			}
			return x.expand(`{
  "token": "«github-app-token»",
  "expires_at": "«ts:sec»",
  "permissions": {
    "checks": "write",
    "contents": "write",
    "metadata": "read",
    "pull_requests": "write",
    "statuses": "write"
  },
  "repository_selection": "selected",
  "repositories": [
` + repo("orders-api", "Order intake and fulfilment API", "TypeScript") + ",\n" +
				repo("infra", "Terraform for the production accounts", "HCL") + ",\n" +
				repo("ledger", "Double-entry ledger service", "Go") + `
  ]
}
`)
		}},

		{"positive/api/secretsmanager-batch-get.json", tmpl(`{
    "SecretValues": [
        {
            "ARN": "arn:aws:secretsmanager:eu-west-1:«digits:12#acct»:secret:rds!db-«uuid»-«alnum:6»",
            "Name": "rds!db-«uuid»",
            "VersionId": "«uuid»",
            "SecretString": "{\"username\":\"orders_admin\",\"password\":\"«generic-password»\",\"engine\":\"postgres\",\"host\":\"orders-prod.c«lower:12».eu-west-1.rds.amazonaws.com\",\"port\":5432,\"dbname\":\"orders\"}",
            "VersionStages": [
                "AWSCURRENT"
            ],
            "CreatedDate": "«ts:micro»"
        },
        {
            "ARN": "arn:aws:secretsmanager:eu-west-1:«digits:12#acct»:secret:storefront/google-oauth-«alnum:6»",
            "Name": "storefront/google-oauth",
            "VersionId": "«uuid»",
            "SecretString": "{\"web\":{\"client_id\":\"«digits:12»-«lower:32».apps.googleusercontent.com\",\"project_id\":\"northwind-storefront\",\"auth_uri\":\"https://accounts.google.com/o/oauth2/auth\",\"token_uri\":\"https://oauth2.googleapis.com/token\",\"client_secret\":\"«google-oauth-client-secret»\",\"redirect_uris\":[\"https://shop.northwind.io/auth/google/callback\"]}}",
            "VersionStages": [
                "AWSCURRENT"
            ],
            "CreatedDate": "«ts:micro»"
        },
        {
            "ARN": "arn:aws:secretsmanager:eu-west-1:«digits:12#acct»:secret:storefront/algolia-admin-«alnum:6»",
            "Name": "storefront/algolia-admin",
            "VersionId": "«uuid»",
            "SecretString": "«generic-api-key»",
            "VersionStages": [
                "AWSCURRENT",
                "AWSPENDING"
            ],
            "CreatedDate": "«ts:micro»"
        },
        {
            "ARN": "arn:aws:secretsmanager:eu-west-1:«digits:12#acct»:secret:storefront/oauth-apps-«alnum:6»",
            "Name": "storefront/oauth-apps",
            "VersionId": "«uuid»",
            "SecretBinary": null,
            "SecretString": "{\"github\":{\"client_id\":\"Iv1.«hex:16»\",\"client_secret\":\"«github-oauth-client-secret»\"}}",
            "VersionStages": [
                "AWSCURRENT"
            ],
            "CreatedDate": "«ts:micro»"
        }
    ],
    "Errors": []
}
`)},

		{"positive/api/kubectl-get-secret.json", tmpl(`{
    "apiVersion": "v1",
    "data": {
        "ADMIN_PASSWORD": "«generic-password|b64»",
        "DB_PASSWORD": "«generic-password|b64»",
        "DB_USER": "YmlsbGluZw==",
        "SESSION_SECRET": "«generic-secret|b64»",
        "SMTP_HOST": "«pick:smtp.sendgrid.net,smtp.mailgun.org|b64»",
        "SMTP_PORT": "NTg3"
    },
    "kind": "Secret",
    "metadata": {
        "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"annotations\":{},\"name\":\"billing-env\",\"namespace\":\"billing\"},\"type\":\"Opaque\"}\n"
        },
        "creationTimestamp": "«ts:sec»",
        "name": "billing-env",
        "namespace": "billing",
        "resourceVersion": "«num:1000000:9999999»",
        "uid": "«uuid»"
    },
    "type": "Opaque"
}
`)},
	}
}

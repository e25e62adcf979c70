# prod.tfvars — applied by the release pipeline
environment         = "production"
region              = "eu-west-1"
availability_zones  = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
instance_type       = "m7g.large"
min_size            = 3
max_size            = 12
enable_deletion_protection = true

db_username = "ledger_admin"
db_password = "zchTXwmJMquQUZaCYjuPJhf2"

alerting = {
  slack_webhook_url = "https://hooks.slack.com/services/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"
  pagerduty_service = "P7BFL1X"
  email             = "oncall@northwind.io"
}

newrelic_account_id = 8536962
newrelic_api_key    = "NRAK-JLDH0AX82ZWN3T3ZJA004WAGDRH"

databricks_host  = "https://adb-4137687036408042.16.azuredatabricks.net"
databricks_token = "dapi1f655d6b3e85f3e1dde533e793948dde"

vault_address = "https://vault.northwind.io:8200"
vault_token   = "hvs.CAESIO4pEIOce288hFllvF8xn7fRe2e4cf8w9RHktpcrBlbKGh4KHGh2cy5qbnRIWlVGZjBVWDI4ZW81VUFPZHBQUlc"

grafana_url  = "https://grafana.northwind.io"
grafana_auth = "glsa_mYTVGmFDSPrmCVU6MDCWMbvmuRvWEXbS_0464113a"

doppler_token = "dp.pt.WeYzHvlqEHsy5NvrU0vAZW6JEC9ZAT08Aidd2OqpHpN"

sendgrid_api_key = "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"
linear_api_key   = "lin_api_JPL6P9bmrdhZZbOO1bAdFjSOy4qNhu0ZBTpUMFvu"

tags = {
  owner       = "platform"
  cost_center = "cc-1042"
  data_class  = "internal"
}

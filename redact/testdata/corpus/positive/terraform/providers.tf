terraform {
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
  access_key = "AKIAD27Y4JPRASQJXEBF"
  secret_key = "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"

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
      "private_key_id": "589ce27d45c2bccf859066cbbcd2b46dcd552e93",
      "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQD2bdVBdGCsvWlC\nHhw/OdVO1DM9pURMJRe8TA/gM3gslR49vmxFUF8UYro7A0HiT0nY/M8y4Z8nLQa+\ntMTkACxdFij410rwFI5NBL3FSgyueJ+NXRSwqY/wH4HZQQmuNWM86n9NFsR2f8W2\nuztDasDk59H3mQwwsbR6b5Tr8hrAncZx0eGiTF1Hr/7OyFFW87P8Hp6BormrzkPE\nfHDIywsXJan/RmfLcHq9UgeA6RuL1xQbYz9QE/yBMDca+auZwAlUr2HIboET6HVF\nSsdnevPERBYe9bPDU+DloK6y6RZL/mFpu4NYkhX6Qw6pUYRjELnZP9PoCDOERIGf\nvweKENbpAgMBAAECggEALXlE8tuiIQcQxJCpnGTCXiEVlVKmbjKVH3Ll2ItdzDuD\n+OhVme/ecWOOSvQJ7et0fmN+cFIsrgF/tR7O1VBeY56MJX4sS3JNJz0yzA72LxXs\n9sm7W38GoAXAPbZAkLMI7heAnU7ehBh6NflCoaR3JRMz8qpjuNiNd2ozdh+NOCjA\nJaJpGNSU4fNB7xd9ac4+dTQP29Xk/SL+k16PaOykYG0GpsASl96Ve+NVoYd8HDIT\nvNcTouMqwtDEerQFSeBrgg0vdJrsbb8rNKpLo49hR/orOQVuGLZhqp8xztVcVZd1\nCPDIey9n6KVnvxqPu6xgtf0rc5fCctfTBggfSrKxhQKBgQCv6Mx31mnkkzGpWZiA\nYsIuxmAqLcQMz4ONzUPr8piwWaMi/SDLBDH1R/PeQ+NIU8d126RPgtwJiT53Z/L+\nq8uZjQK1G4O4vcleadhbLG0k0aQmc8cOzl5zIm2oKH9zll0Gs67CmYuDiGGYHL6v\niaaynVanhDV4gCQ2S9KgzGwg5wKBgQCMD/eTTlVK7hTR1k70DiL605Vrw8tg2Xdy\nKGpYhl7ukLR/wlmwSHaH78s57JemBW/N1VOUo3yiIHXStcTg2hHmu85OxxmYlbX4\nus5WlqkDMPtOnN5Blv3+G/Yoq1+0Vpcy/oOsDXHt2z1jIzVTjMY2Iiba0ZCE+phO\neEYEIqsYiwKBgQCFrOfbwF9bvIzl1Pw2tANjx/eVMUFmv2grSH2O1DK75CsGTRw/\nm5iHc9uFHhH4dQnY1HwdhSlrba0R7ESxp/Zs9XBn2JL1lF8Ll+veYiTmdXtxCPVu\nDjUw5BKyjljpto6QPrlnddeG0JOK+QMiYAo1zbjWno8TJRG1Obm1uI3P3QKBgCXy\nWIus3ayv6YpSQCeK3pz1VSdvrELEb5EWadIewU14l0dz6I3AEIZtYg9rJavcO9ov\nPcp/PFtybf41SU6cWoy268HsSh/EbxDsQHB2NSD7ra8yen+pa+2szZP3dj27pVaT\nnsQcgPVahMvcLw4zYWo9q7weKOZzlzRs7id/0qe/AoGBAK/rT/uCS1dE7AWCZ8W9\nmrbL9qRCe1Wu16H1YqRf/96yV4ZijaAN1kih23D4I5oL/tUJGfRz+Gz1gfO4RgCI\nThl+37yi+MyY1Fm2BaeLwG9c3XPjNpSIyIYtl84zsuz3G8RINgkoRiPWqzZyzbNM\nOMP4BNVIi/fmWuAFeysTFDMP\n-----END PRIVATE KEY-----\n",
      "client_email": "terraform@northwind-analytics-prod.iam.gserviceaccount.com",
      "client_id": "124793888045887317363",
      "auth_uri": "https://accounts.google.com/o/oauth2/auth",
      "token_uri": "https://oauth2.googleapis.com/token"
    }
  EOT
}

provider "azurerm" {
  features {}
  subscription_id = "4abbe4d1-b433-409c-b81b-a89c2dac1bd6"
  tenant_id       = "d34ed944-09b3-4304-abd0-a5e9f82c5085"
  client_id       = "b2621ae0-836d-4176-9252-64678b7f6bd9"
  client_secret   = "hJq6Q~-8PkV_4NXQIL_LjW6-yfm-3Xys~4.Vx_gM"
}

provider "github" {
  owner = "northwind"
  token = "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"
}

provider "datadog" {
  api_url = "https://api.datadoghq.eu/"
  api_key = "00604c24ac696124ef6fa0c5bc8a1096"
  app_key = "e191841f5590f7cea554840f13a58fd04b14f384"
}

provider "heroku" {
  email   = "ops@northwind.io"
  api_key = "HRKU-AAkhsmsLkv4YBDTpUdnvwvzoAESG5BvGcXO3W-h-QSDSlB-Xnffc-2YlUA5G"
}

provider "digitalocean" {
  token = "dop_v1_c8f6d29c22e830bdd0a4acf3657c6099fd297ec2fe1e1d3877bc706f063c22a8"
}

locals {
  maps_browser_key = "AIzaSyjhJvv1PyDmehFtZbx5d-S9IzBCuWO7-2R"
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
  password                = "t9QQmlyctzzbU6zgFc7qwyHt"
  backup_retention_period = 14
  deletion_protection     = true
  storage_encrypted       = true
  tags                    = local.common_tags
}

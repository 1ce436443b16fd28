# Provisions stickyd on an existing Nomad cluster: the job in jobs/ with its
# artifact URL. `terraform init && terraform apply -var stickyd_artifact=URL`.
terraform {
  required_providers {
    nomad = {
      source  = "hashicorp/nomad"
      version = "~> 2.0"
    }
  }
}

variable "nomad_address" {
  type    = string
  default = "http://127.0.0.1:4646"
}

variable "stickyd_artifact" {
  type        = string
  description = "URL of a tarball holding stickyd and demo-worker"
}

provider "nomad" {
  address = var.nomad_address
}

resource "nomad_job" "stickyd" {
  jobspec = file("${path.module}/../jobs/stickyd.nomad")

  hcl2 {
    vars = {
      stickyd_artifact = var.stickyd_artifact
    }
  }
}

# Deploys stickyd on an existing Nomad cluster with Consul: the servers' job
# from jobs/stickyd.nomad (the raft leader then registers one Nomad job per
# catalog group), and the operators' keys in Consul KV. docs/terraform.md.
#
#   terraform init
#   terraform apply -var-file=site.tfvars

provider "nomad" {
  address   = var.nomad_address
  secret_id = var.nomad_token != "" ? var.nomad_token : null
}

provider "consul" {
  address = var.consul_address
  token   = var.consul_token != "" ? var.consul_token : null
}

locals {
  jobspec = var.jobspec != "" ? var.jobspec : "${path.module}/../jobs/stickyd.nomad"
}

# The servers' secrets, in the job's own Nomad variable: the tasks render
# them into their secrets directory (0600), so the job Nomad shows holds
# none. (Terraform's state holds them: keep it as secret as they are.)
resource "nomad_variable" "stickyd" {
  path = "nomad/jobs/stickyd"
  items = merge(
    { admin_token = var.admin_token, cookie_key = var.cookie_key },
    var.consul_token != "" ? { consul_token = var.consul_token } : {},
    var.nomad_token != "" ? { nomad_token = var.nomad_token } : {},
    var.tls == null ? {} : {
      tls_ca          = var.tls.ca
      tls_server_cert = var.tls.server_cert
      tls_server_key  = var.tls.server_key
      tls_host_cert   = var.tls.host_cert
      tls_host_key    = var.tls.host_key
    },
  )
}

resource "nomad_job" "stickyd" {
  jobspec          = file(local.jobspec)
  purge_on_destroy = var.purge_on_destroy
  # The tasks wait for the variable; written first, they need not.
  depends_on = [nomad_variable.stickyd]

  # The jobspec's HCL2 variables, as strings (Nomad parses each by its
  # declared type, so lists and numbers go as HCL); the names are those of
  # the variable blocks in jobs/stickyd.nomad.
  hcl2 {
    vars = {
      stickyd_artifact = var.stickyd_artifact
      stickyd_checksum = var.stickyd_checksum
      datacenters      = jsonencode(var.datacenters)
      driver           = var.driver
      servers          = tostring(var.servers)
      bundle_archive   = var.bundle_archive
      consul_address   = var.consul_address
      nomad_address    = var.nomad_address
      log_level        = var.log_level
      tls              = tostring(var.tls != null)
    }
  }
}

# The operators' keys under the agents' prefix. The raft leader's mirror
# owns <prefix>placement/ and <prefix>groups/ (variables.tf refuses them);
# Terraform deletes the keys it wrote when they leave consul_kv.
resource "consul_keys" "stickyd" {
  count = length(var.consul_kv) > 0 ? 1 : 0

  dynamic "key" {
    for_each = var.consul_kv
    content {
      path   = "${var.consul_prefix}${key.key}"
      value  = key.value
      delete = true
    }
  }
}

# Where Terraform reaches Nomad and Consul. The agents reach them at
# nomad_address and consul_address too, so use addresses the cluster's
# clients can reach.

variable "nomad_address" {
  type        = string
  default     = "http://127.0.0.1:4646"
  description = "The Nomad HTTP API: where the job is submitted, and where the raft leader registers the groups' jobs."
}

variable "nomad_token" {
  type        = string
  default     = ""
  sensitive   = true
  description = "Nomad ACL token (empty: none, or $NOMAD_TOKEN for Terraform)."
}

variable "consul_address" {
  type        = string
  default     = "127.0.0.1:8500"
  description = "The Consul HTTP API, for Terraform and for the agents."
}

variable "consul_token" {
  type        = string
  default     = ""
  sensitive   = true
  description = "Consul ACL token (empty: none, or $CONSUL_HTTP_TOKEN for Terraform)."
}

# The job: these are passed to jobs/stickyd.nomad as its HCL2 variables.

variable "jobspec" {
  type        = string
  default     = ""
  description = "Path of the stickyd jobspec; empty means jobs/stickyd.nomad of this repository."
}

variable "datacenters" {
  type    = list(string)
  default = ["dc1"]
}

variable "servers" {
  type        = number
  default     = 3
  description = "Raft voters: 1, 3 or 5."

  validation {
    condition     = contains([1, 3, 5], var.servers)
    error_message = "servers must be 1, 3 or 5."
  }
}

variable "driver" {
  type        = string
  default     = "exec"
  description = "Task driver of the servers and of the groups' jobs: exec or raw_exec."

  validation {
    condition     = contains(["exec", "raw_exec"], var.driver)
    error_message = "driver must be exec or raw_exec."
  }
}

variable "stickyd_artifact" {
  type        = string
  description = "URL of a tarball holding the stickyd binary at its root (from the release archive, never a source forge)."
}

variable "stickyd_checksum" {
  type        = string
  description = "Checksum of that tarball, \"sha256:<hex>\"."

  validation {
    condition     = can(regex("^sha256:[0-9a-f]{64}$", var.stickyd_checksum))
    error_message = "stickyd_checksum must be \"sha256:\" and 64 hex digits."
  }
}

variable "bundle_archive" {
  type        = string
  description = "The bundle archive's http(s) URL, as servers and clients reach it."
}

variable "admin_token" {
  type        = string
  sensitive   = true
  description = "The cluster's admin token (the admin API's X-Stickyd-Token)."
}

variable "cookie_key" {
  type        = string
  sensitive   = true
  description = "The key signing connection cookies, the same on every front (at least 32 characters)."

  validation {
    condition     = length(var.cookie_key) >= 32
    error_message = "cookie_key must be at least 32 characters."
  }
}

variable "log_level" {
  type    = string
  default = "info"
}

variable "purge_on_destroy" {
  type        = bool
  default     = false
  description = "Purge the job from Nomad on destroy instead of only stopping it."
}

# Consul KV.

variable "consul_prefix" {
  type        = string
  default     = "stickyd/"
  description = "The KV prefix stickyd owns (the agents' Consul prefix; \"stickyd/\" unless configured otherwise)."

  validation {
    condition     = endswith(var.consul_prefix, "/")
    error_message = "consul_prefix must end with \"/\"."
  }
}

variable "consul_kv" {
  type        = map(string)
  default     = {}
  description = "Keys (relative to consul_prefix) and values that operators own, e.g. { \"maintenance/message\" = \"...\" }."

  validation {
    condition     = alltrue([for k in keys(var.consul_kv) : !startswith(k, "placement/") && !startswith(k, "groups/")])
    error_message = "placement/ and groups/ belong to the raft leader's Consul mirror; put operators' keys elsewhere."
  }
}

variable "tls" {
  type = object({
    ca          = string
    server_cert = string
    server_key  = string
    host_cert   = string
    host_key    = string
  })
  default     = null
  sensitive   = true
  description = "Mutual TLS between the agents: the PEM of the CA, a server and a host certificate with their keys (stickyd tls ca create; stickyd tls cert create -server, -host). Null: off."
}

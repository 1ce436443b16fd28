# stickyd on Nomad: the servers (raft voters, supervisor, front). Each
# catalog group then runs as its own Nomad job ("stickyd-group-<name>"),
# registered by the raft leader: its tasks are stickyd hosts running the
# group's bundle. Servers find each other, and hosts find servers, through
# Consul; the leader mirrors the placement registry into Consul KV.
#
#   nomad job run -var-file=site.vars.hcl jobs/stickyd.nomad
#
# docs/deploy-nomad.md goes from zero to a running cluster.

variable "datacenters" {
  type    = list(string)
  default = ["dc1"]
}

variable "servers" {
  type        = number
  default     = 3
  description = "Raft voters: 3 or 5."
}

variable "driver" {
  type        = string
  default     = "exec"
  description = "Task driver of the servers and of the group jobs: exec, or raw_exec."
}

variable "stickyd_artifact" {
  type        = string
  default     = ""
  description = "URL of a tarball holding the stickyd binary at its root (or set stickyd_command)."
}

variable "stickyd_checksum" {
  type        = string
  default     = ""
  description = "Checksum of that tarball, \"sha256:<hex>\"."
}

variable "stickyd_command" {
  type        = string
  default     = ""
  description = "Path of the stickyd binary on every client, instead of an artifact (raw_exec)."
}

variable "bundle_archive" {
  type        = string
  description = "The bundle archive's http(s) URL as servers and clients reach it."
}

variable "admin_token" {
  type        = string
  description = "The cluster's admin token (servers and hosts share it)."
}

variable "cookie_key" {
  type        = string
  description = "The key signing connection cookies (at least 32 characters), the same on every front."
}

variable "consul_address" {
  type    = string
  default = "127.0.0.1:8500"
}

variable "consul_token" {
  type    = string
  default = ""
}

variable "nomad_address" {
  type        = string
  default     = "http://127.0.0.1:4646"
  description = "Where the leader registers the groups' jobs."
}

variable "nomad_token" {
  type    = string
  default = ""
}

variable "log_level" {
  type    = string
  default = "info"
}

locals {
  stickyd = var.stickyd_artifact != "" ? "local/stickyd" : var.stickyd_command
  # The stickyd binary as the leader tells the group jobs to fetch it.
  stickyd_source = var.stickyd_artifact != "" ? "stickyd_artifact = \"${var.stickyd_artifact}\"\n    stickyd_checksum = \"${var.stickyd_checksum}\"" : "stickyd_command = \"${var.stickyd_command}\""
}

job "stickyd" {
  type        = "service"
  datacenters = var.datacenters

  # Rolling upgrade of the framework: one server at a time; it parks the
  # people its front holds on SIGTERM, they wake on the next request.
  update {
    max_parallel      = 1
    health_check      = "checks"
    min_healthy_time  = "10s"
    healthy_deadline  = "3m"
    progress_deadline = "10m"
    auto_revert       = true
  }

  group "server" {
    count = var.servers

    network {
      port "front" {}
      port "admin" {}
      port "raft" {}
      port "rpc" {}
    }

    # The raft log, snapshots and parked people outlive an allocation.
    ephemeral_disk {
      size    = 1024
      sticky  = true
      migrate = true
    }

    restart {
      attempts = 3
      interval = "5m"
      delay    = "10s"
      mode     = "delay"
    }

    service {
      name     = "stickyd-front"
      port     = "front"
      provider = "consul"
      tags     = ["front"]
      check {
        type     = "http"
        path     = "/_stickyd/health"
        interval = "5s"
        timeout  = "2s"
      }
    }

    # The admin API: servers find each other (and hosts find servers)
    # through this service.
    service {
      name     = "stickyd-server"
      port     = "admin"
      provider = "consul"
      tags     = ["admin"]
      check {
        type     = "tcp"
        interval = "5s"
        timeout  = "2s"
      }
    }

    # Prometheus scrapes GET /metrics on the admin port (no token needed).
    service {
      name     = "stickyd-metrics"
      port     = "admin"
      provider = "consul"
      tags     = ["prometheus"]
      meta {
        metrics_path = "/metrics"
      }
    }

    task "server" {
      driver = var.driver

      dynamic "artifact" {
        for_each = var.stickyd_artifact != "" ? [var.stickyd_artifact] : []
        content {
          source      = artifact.value
          destination = "local/"
          options {
            checksum = var.stickyd_checksum
          }
        }
      }

      template {
        destination = "secrets/cookie.key"
        perms       = "0600"
        data        = var.cookie_key
      }

      template {
        destination   = "local/stickyd.hcl"
        change_mode   = "restart"
        left_delimiter  = "[["
        right_delimiter = "]]"
        data          = <<-HCL
          name      = "stickyd-server-[[ env "NOMAD_ALLOC_INDEX" ]]"
          data_dir  = "[[ env "NOMAD_ALLOC_DIR" ]]/data"
          log_level = "${var.log_level}"

          server {
            bootstrap_expect = ${var.servers}
            raft_addr        = "[[ env "NOMAD_ADDR_raft" ]]"
            rpc_addr         = "[[ env "NOMAD_ADDR_rpc" ]]"
          }
          # Servers run no group: each group is a Nomad job of hosts.
          host { enabled = false }
          front {
            address         = "[[ env "NOMAD_ADDR_front" ]]"
            cookie_key_file = "[[ env "NOMAD_SECRETS_DIR" ]]/cookie.key"
          }
          admin {
            address = "[[ env "NOMAD_ADDR_admin" ]]"
            token   = "${var.admin_token}"
          }
          consul {
            address = "${var.consul_address}"
            token   = "${var.consul_token}"
          }
          bundles {
            archive = "${var.bundle_archive}"
          }
          nomad {
            address     = "${var.nomad_address}"
            token       = "${var.nomad_token}"
            datacenters = ${jsonencode(var.datacenters)}
            driver      = "${var.driver}"
            ${local.stickyd_source}
          }
        HCL
      }

      config {
        command = local.stickyd
        args    = ["agent", "-config", "local/stickyd.hcl"]
      }

      # On SIGTERM the server parks the people its workers hold; keep the
      # kill timeout above the agent's shutdown_timeout.
      kill_signal  = "SIGTERM"
      kill_timeout = "150s"

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}

# stickyd on Nomad: the servers (raft voters, supervisor, front). Each
# catalog group then runs as its own Nomad job ("stickyd-group-<name>"),
# registered by the raft leader: its tasks are stickyd hosts running the
# group's bundle. Servers find each other, and hosts find servers, through
# Consul; the leader mirrors the placement registry into Consul KV.
#
#   nomad var put nomad/jobs/stickyd admin_token=... cookie_key=... \
#     [consul_token=...] [nomad_token=...]
#   nomad job run -var-file=site.vars.hcl jobs/stickyd.nomad
#
# The secrets are not variables of this file: the tasks read them from the
# Nomad variable nomad/jobs/stickyd (the job's own path, readable by its
# tasks without an ACL policy) into files of their secrets directory, so
# `nomad job inspect stickyd` shows none. The leader writes each group
# job's own variable (nomad/jobs/stickyd-group-<name>) the same way.
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

variable "kill_timeout" {
  type        = string
  default     = "30s"
  description = "Between SIGTERM and SIGKILL; the agent parks everyone a margin before. Nomad clients cap it at their max_kill_timeout (30s unless raised)."
}

variable "node_pool" {
  type        = string
  default     = "default"
  description = "The Nomad node pool of the servers."
}

variable "distinct_hosts" {
  type        = bool
  default     = false
  description = "One server per Nomad client node (needs at least as many nodes as servers)."
}

variable "disk_mb" {
  type        = number
  default     = 1024
  description = "Each server's ephemeral disk (raft log, snapshots), sticky and migrated."
}

variable "sticky_disk" {
  type        = bool
  default     = true
  description = "Keep (and migrate) a server's raft data across its allocations. A server without it joins the cluster again and catches up from a snapshot."
}

variable "group_hosts" {
  type        = number
  default     = 2
  description = "Host allocations per group job: a drained host moves its people to the others."
}

variable "group_max_hosts" {
  type        = number
  default     = 0
  description = "Above group_hosts, the group jobs get a scaling block up to it (0: none)."
}

variable "group_cpu" {
  type    = number
  default = 500
}

variable "group_memory_mb" {
  type    = number
  default = 512
}

variable "group_disk_mb" {
  type        = number
  default     = 1024
  description = "A group host's ephemeral disk: it holds the park store."
}

variable "group_node_pool" {
  type        = string
  default     = ""
  description = "The Nomad node pool of the group jobs (empty: the default pool)."
}

variable "group_distinct_hosts" {
  type        = bool
  default     = false
  description = "Each host of a group on its own node (otherwise spread over nodes when there are several)."
}

variable "consul_address" {
  type    = string
  default = "127.0.0.1:8500"
}

variable "nomad_address" {
  type        = string
  default     = "http://127.0.0.1:4646"
  description = "Where the leader registers the groups' jobs."
}

variable "log_level" {
  type    = string
  default = "info"
}

variable "tls" {
  type        = bool
  default     = false
  description = "Mutual TLS on the raft and peer-link ports (docs/security.md): the certificates come from the job's Nomad variable (tls_ca, tls_server_cert, tls_server_key, tls_host_cert, tls_host_key; stickyd tls makes them)."
}

locals {
  stickyd = var.stickyd_artifact != "" ? "local/stickyd" : var.stickyd_command
  # The stickyd binary as the leader tells the group jobs to fetch it.
  stickyd_source = var.stickyd_artifact != "" ? "stickyd_artifact = \"${var.stickyd_artifact}\"\n    stickyd_checksum = \"${var.stickyd_checksum}\"" : "stickyd_command = \"${var.stickyd_command}\""
  # With tls: the files the templates below render from the variable.
  tls_files = var.tls ? {
    "agent-ca.pem"   = "tls_ca"
    "server.pem"     = "tls_server_cert"
    "server-key.pem" = "tls_server_key"
    "host.pem"       = "tls_host_cert"
    "host-key.pem"   = "tls_host_key"
  } : {}
  tls_block = var.tls ? "tls {\n  ca_file   = \"[[ env \"NOMAD_SECRETS_DIR\" ]]/agent-ca.pem\"\n  cert_file = \"[[ env \"NOMAD_SECRETS_DIR\" ]]/server.pem\"\n  key_file  = \"[[ env \"NOMAD_SECRETS_DIR\" ]]/server-key.pem\"\n}" : ""
  # The group jobs' hosts get the host certificate through the leader.
  host_tls = var.tls ? "host_cert_file = \"[[ env \"NOMAD_SECRETS_DIR\" ]]/host.pem\"\n            host_key_file  = \"[[ env \"NOMAD_SECRETS_DIR\" ]]/host-key.pem\"" : ""
}

job "stickyd" {
  type        = "service"
  datacenters = var.datacenters
  node_pool   = var.node_pool

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

    dynamic "constraint" {
      for_each = var.distinct_hosts ? [true] : []
      content {
        operator = "distinct_hosts"
        value    = "true"
      }
    }

    network {
      port "front" {}
      port "admin" {}
      port "raft" {}
      port "rpc" {}
    }

    # The raft log, snapshots and parked people outlive an allocation.
    ephemeral_disk {
      size    = var.disk_mb
      sticky  = var.sticky_disk
      migrate = var.sticky_disk
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

    # The admin API: servers find each other (and hosts and the CLI find
    # servers) through this service. Passing only while the server is a
    # raft voter that hears from its leader and keeps up with the log.
    service {
      name     = "stickyd-server"
      port     = "admin"
      provider = "consul"
      tags     = ["admin"]
      check {
        name     = "raft member"
        type     = "http"
        path     = "/v1/agent/health"
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
      check {
        type     = "http"
        path     = "/metrics"
        interval = "10s"
        timeout  = "2s"
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

      # The secrets, from the job's Nomad variable; the task waits for it.
      template {
        destination = "secrets/cookie.key"
        perms       = "0600"
        change_mode = "restart"
        data        = "{{ with nomadVar \"nomad/jobs/stickyd\" }}{{ .cookie_key }}{{ end }}"
      }

      template {
        destination = "secrets/admin.token"
        perms       = "0600"
        change_mode = "restart"
        data        = "{{ with nomadVar \"nomad/jobs/stickyd\" }}{{ .admin_token }}{{ end }}"
      }

      # The Consul and Nomad ACL tokens, if the variable holds them (an
      # empty file otherwise: no token).
      template {
        destination = "secrets/consul.token"
        perms       = "0600"
        change_mode = "restart"
        data        = "{{ with nomadVar \"nomad/jobs/stickyd\" }}{{ .consul_token }}{{ end }}"
      }

      template {
        destination = "secrets/nomad.token"
        perms       = "0600"
        change_mode = "restart"
        data        = "{{ with nomadVar \"nomad/jobs/stickyd\" }}{{ .nomad_token }}{{ end }}"
      }

      # With tls: the CA, this server's certificate and key, and the
      # hosts' certificate and key (the leader hands them to the group
      # jobs), from the variable.
      dynamic "template" {
        for_each = local.tls_files
        content {
          destination   = "secrets/${template.key}"
          perms         = "0600"
          change_mode   = "signal"
          change_signal = "SIGHUP" # the agent reloads its certificates
          data          = "{{ with nomadVar \"nomad/jobs/stickyd\" }}{{ .${template.value} }}{{ end }}"
        }
      }

      template {
        destination     = "local/stickyd.hcl"
        perms           = "0600"
        change_mode     = "restart"
        left_delimiter  = "[["
        right_delimiter = "]]"
        data            = <<-HCL
          name      = "stickyd-server-[[ env "NOMAD_ALLOC_INDEX" ]]"
          data_dir  = "[[ env "NOMAD_ALLOC_DIR" ]]/data"
          log_level = "${var.log_level}"
          # The stop (parking) finishes a margin before Nomad kills.
          kill_timeout = "${var.kill_timeout}"

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
            address    = "[[ env "NOMAD_ADDR_admin" ]]"
            token_file = "[[ env "NOMAD_SECRETS_DIR" ]]/admin.token"
          }
          consul {
            address    = "${var.consul_address}"
            token_file = "[[ env "NOMAD_SECRETS_DIR" ]]/consul.token"
          }
          bundles {
            archive = "${var.bundle_archive}"
          }
          nomad {
            address     = "${var.nomad_address}"
            token_file  = "[[ env "NOMAD_SECRETS_DIR" ]]/nomad.token"
            datacenters = ${jsonencode(var.datacenters)}
            driver      = "${var.driver}"
            ${local.stickyd_source}
            hosts          = ${var.group_hosts}
            ${var.group_max_hosts > 0 ? "max_hosts = ${var.group_max_hosts}" : ""}
            cpu            = ${var.group_cpu}
            memory_mb      = ${var.group_memory_mb}
            disk_mb        = ${var.group_disk_mb}
            node_pool      = "${var.group_node_pool}"
            distinct_hosts = ${var.group_distinct_hosts}
            ${local.host_tls}
          }
          ${local.tls_block}
        HCL
      }

      config {
        command = local.stickyd
        args    = ["agent", "-config", "local/stickyd.hcl"]
      }

      # On SIGTERM the server parks the people its workers hold, within
      # the kill timeout it is given (kill_timeout in its configuration).
      kill_signal  = "SIGTERM"
      kill_timeout = var.kill_timeout

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}

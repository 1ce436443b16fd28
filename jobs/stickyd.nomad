# stickyd on Nomad: one agent per allocation running the server role, the
# front and the demo group's workers (go-plugin subprocesses of the task).
#
#   nomad job run jobs/stickyd.nomad
#
# The artifact URLs are set with -var; the binaries come from the shared
# archive, never from a source forge.
variable "stickyd_artifact" {
  type        = string
  description = "URL of a tarball holding stickyd and demo-worker"
}

variable "front_port" {
  type    = number
  default = 8080
}

job "stickyd" {
  type = "service"

  group "server" {
    count = 1

    network {
      port "front" { static = var.front_port }
      port "raft" {}
    }

    service {
      name     = "stickyd-front"
      port     = "front"
      provider = "consul"
      check {
        type     = "http"
        path     = "/_stickyd/health"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "agent" {
      driver = "exec"

      artifact {
        source      = var.stickyd_artifact
        destination = "local/"
      }

      template {
        destination = "local/stickyd.hcl"
        data        = <<-HCL
          name     = "{{ env "NOMAD_ALLOC_ID" }}"
          data_dir = "{{ env "NOMAD_ALLOC_DIR" }}/data"
          server {
            bootstrap_expect = 1
            raft_addr        = "{{ env "NOMAD_ADDR_raft" }}"
          }
          front {
            address = "0.0.0.0:{{ env "NOMAD_PORT_front" }}"
          }
          group "demo" {
            workers = 2
            plugin { command = "{{ env "NOMAD_TASK_DIR" }}/demo-worker" }
          }
        HCL
      }

      config {
        command = "local/stickyd"
        args    = ["agent", "-config", "local/stickyd.hcl"]
      }

      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}

# The stickyd provider: a canary group running the demo application built
# into stickyd, with one person and one team sent to it. The provider is
# installed from a directory (docs/terraform.md: dev_overrides), so there is
# no `terraform init`:
#
#   export STICKYD_TOKEN=...
#   terraform apply -var stickyd_address=http://127.0.0.1:4650
#
# test/terraform applies this example to a real agent: keep them in step.

terraform {
  required_version = ">= 1.5"

  required_providers {
    stickyd = {
      source = "stickyd.local/stickyd/stickyd"
    }
  }
}

variable "stickyd_address" {
  type        = string
  default     = "http://127.0.0.1:4650"
  description = "The admin API address. The token comes from STICKYD_TOKEN."
}

variable "canary_workers" {
  type        = number
  default     = 1
  description = "Workers per agent in the canary group. Changing it replaces the group."
}

provider "stickyd" {
  address = var.stickyd_address
}

resource "stickyd_group" "canary" {
  name          = "canary"
  builtin       = "demo"
  workers       = var.canary_workers
  memory_max_mb = 512
}

# The rules name the group by its id, not its name: replacing the group then
# replaces them first, because stickyd refuses to retire a group that a rule
# still sends people to.
resource "stickyd_assignment" "maria" {
  id    = "maria-canary"
  group = stickyd_group.canary.id
  user  = "maria"
}

resource "stickyd_assignment" "qa" {
  id    = "qa-canary"
  group = stickyd_group.canary.id
  attr  = "team"
  value = "qa"
}

# A maintenance window on the backend "db-a": while it exists, requests that
# need db-a wait (at most max_wait each) before their handler runs; destroy
# it to end the window.
resource "stickyd_maintenance" "db_a" {
  backend  = "db-a"
  reason   = "upgrading to PostgreSQL 16.4"
  max_wait = "45s"
}

output "canary_group" {
  value = stickyd_group.canary.id
}

output "job_id" {
  value       = nomad_job.stickyd.id
  description = "The servers' Nomad job."
}

output "job_modify_index" {
  value       = nomad_job.stickyd.modify_index
  description = "The job's modify index in Nomad after this apply."
}

output "front_service" {
  value       = "stickyd-front"
  description = "The Consul service of the fronts (HTTP and WebSocket), as jobs/stickyd.nomad registers it."
}

output "admin_service" {
  value       = "stickyd-server"
  description = "The Consul service of the servers' admin API: point STICKYD_ADDR (or the stickyd provider's address) at one of them."
}

output "consul_keys" {
  value       = [for k in keys(var.consul_kv) : "${var.consul_prefix}${k}"]
  description = "The KV paths this module wrote."
}
